package arfl.bench;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The benchmark's pipeline on Kafka Streams: keep the events whose {@code amount} exceeds a
 * bound, write {@code seq, user, amount, ts} of each as JSON.
 *
 * <p>{@code java -cp peers-kstreams.jar:lib/* arfl.bench.PeersFilter FILE}: FILE holds the
 * Streams properties plus {@code arfl.input}, {@code arfl.output} and {@code arfl.min.amount},
 * which are taken out before the rest goes to Kafka Streams. Every state change is printed
 * ({@code peers-kstreams: state OLD -> NEW}); SIGTERM closes the instance.
 */
public final class PeersFilter {
  private static final ObjectMapper JSON = new ObjectMapper();

  private PeersFilter() {}

  public static void main(String[] args) throws IOException, InterruptedException {
    Properties props = new Properties();
    try (InputStream in = Files.newInputStream(Path.of(args[0]))) {
      props.load(in);
    }
    String input = (String) props.remove("arfl.input");
    String output = (String) props.remove("arfl.output");
    double min = Double.parseDouble((String) props.remove("arfl.min.amount"));

    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
        .mapValues(PeersFilter::parse)
        .filter((key, event) -> event != null && event.path("amount").asDouble(min) > min)
        .mapValues(PeersFilter::project)
        .to(output, Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setStateListener(
        (now, before) -> System.out.println("peers-kstreams: state " + before + " -> " + now));
    CountDownLatch closed = new CountDownLatch(1);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(10));
                  closed.countDown();
                }));
    streams.start();
    closed.await();
  }

  /** The event, or null when it is not a JSON object (end-of-input markers have no amount). */
  private static JsonNode parse(String value) {
    try {
      JsonNode node = value == null ? null : JSON.readTree(value);
      return node != null && node.isObject() ? node : null;
    } catch (JsonProcessingException e) {
      return null;
    }
  }

  private static String project(JsonNode event) {
    ObjectNode out = JSON.createObjectNode();
    for (String field : new String[] {"seq", "user", "amount", "ts"}) {
      out.set(field, event.get(field));
    }
    return out.toString();
  }
}
