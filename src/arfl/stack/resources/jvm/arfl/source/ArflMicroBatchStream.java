package arfl.source;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;

/** Driver side: every boundary comes from the {@link Oracle}; reads are planned from it too. */
final class ArflMicroBatchStream implements MicroBatchStream, SupportsAdmissionControl {
    private static final ObjectMapper JSON = new ObjectMapper();
    private final String bootstrap;
    private final String topic;
    private final Oracle oracle;

    ArflMicroBatchStream(String bootstrap, String topic, Oracle oracle) {
        this.bootstrap = bootstrap;
        this.topic = topic;
        this.oracle = oracle;
    }

    static final class JsonOffset extends Offset {
        private final String json;

        JsonOffset(String json) {
            this.json = json;
        }

        @Override
        public String json() {
            return json;
        }
    }

    @Override
    public Offset initialOffset() {
        return new JsonOffset(oracle.initialOffset());
    }

    @Override
    public Offset deserializeOffset(String json) {
        return new JsonOffset(json);
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) is used");
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
        return new JsonOffset(oracle.latestOffset(start.json()));
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return ReadLimit.allAvailable();
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        String plan = oracle.partitions(start.json(), end.json());
        List<InputPartition> tasks = new ArrayList<>();
        try {
            for (JsonNode task : JSON.readTree(plan)) {
                List<KafkaRange> ranges = new ArrayList<>();
                for (JsonNode r : task) {
                    JsonNode late = r.get(3);
                    long[] firsts = new long[late.size()];
                    Long[] values = new Long[late.size()];
                    for (int i = 0; i < late.size(); i++) {
                        firsts[i] = late.get(i).get(0).asLong();
                        JsonNode v = late.get(i).get(1);
                        values[i] = v == null || v.isNull() ? null : v.asLong();
                    }
                    ranges.add(new KafkaRange(
                        bootstrap, topic, r.get(0).asInt(), r.get(1).asLong(), r.get(2).asLong(),
                        firsts, values));
                }
                tasks.add(new RangesPartition(ranges.toArray(new KafkaRange[0])));
            }
        } catch (java.io.IOException e) {
            throw new IllegalStateException("arfl-kafka-jvm: bad plan from the oracle: " + plan, e);
        }
        return tasks.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new RangeReaderFactory();
    }

    @Override
    public void commit(Offset end) {
        // The position lives in Spark's checkpoint, not in Kafka.
    }

    @Override
    public void stop() {
        oracle.stop();
    }
}
