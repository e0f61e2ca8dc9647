package arfl.source;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads exactly {@code [from, to)} of each range in offset order, dropping marker records
 * (header {@code arfl-marker}). Consumers are pooled per executor JVM and bootstrap: after the
 * first batch a read costs an assign, a seek and the fetch, never a client start-up.
 */
final class RangeReader implements PartitionReader<InternalRow> {
    static final String MARKER_HEADER = "arfl-marker";
    static final long FETCH_TIMEOUT_MS = 30_000;
    private static final ConcurrentHashMap<String, ConcurrentLinkedQueue<KafkaConsumer<byte[], byte[]>>>
        POOL = new ConcurrentHashMap<>();

    private final KafkaRange[] ranges;
    private int rangeIndex = -1;
    private KafkaRange range;
    private KafkaConsumer<byte[], byte[]> consumer;
    private final ArrayDeque<ConsumerRecord<byte[], byte[]>> buffered = new ArrayDeque<>();
    private long next;
    private long deadline;
    private InternalRow current;

    RangeReader(KafkaRange[] ranges) {
        this.ranges = ranges;
    }

    private static KafkaConsumer<byte[], byte[]> borrow(String bootstrap) {
        KafkaConsumer<byte[], byte[]> c = POOL.computeIfAbsent(
            bootstrap, b -> new ConcurrentLinkedQueue<>()).poll();
        if (c != null) {
            return c;
        }
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, "arfl-source-reader");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "arfl-jvm-reader-" + ProcessHandle.current().pid());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "10");
        p.put(ConsumerConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "5000");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    private static void giveBack(String bootstrap, KafkaConsumer<byte[], byte[]> c) {
        try {
            c.assign(Collections.emptyList());
            POOL.computeIfAbsent(bootstrap, b -> new ConcurrentLinkedQueue<>()).add(c);
        } catch (RuntimeException e) {
            c.close(Duration.ofSeconds(1));
        }
    }

    private boolean openNextRange() {
        while (++rangeIndex < ranges.length) {
            KafkaRange r = ranges[rangeIndex];
            if (r.to <= r.from) {
                continue;
            }
            if (consumer == null) {
                consumer = borrow(r.bootstrap);
            }
            TopicPartition tp = new TopicPartition(r.topic, r.partition);
            consumer.assign(Collections.singletonList(tp));
            consumer.seek(tp, r.from);
            range = r;
            next = r.from;
            deadline = System.currentTimeMillis() + FETCH_TIMEOUT_MS;
            buffered.clear();
            return true;
        }
        return false;
    }

    private static boolean isMarker(ConsumerRecord<byte[], byte[]> rec) {
        Iterator<Header> it = rec.headers().headers(MARKER_HEADER).iterator();
        return it.hasNext();
    }

    private static UTF8String text(byte[] b) {
        return b == null ? null : UTF8String.fromBytes(b);
    }

    @Override
    public boolean next() {
        while (true) {
            if (range == null && !openNextRange()) {
                return false;
            }
            while (!buffered.isEmpty()) {
                ConsumerRecord<byte[], byte[]> rec = buffered.poll();
                long off = rec.offset();
                if (off < next) {
                    continue;
                }
                next = off + 1;
                if (off >= range.to) {
                    break;
                }
                if (isMarker(rec)) {
                    continue;
                }
                current = new GenericInternalRow(new Object[] {
                    text(rec.key()), text(rec.value()), UTF8String.fromString(range.topic),
                    range.partition, off, rec.timestamp(), range.lateBefore(off)});
                return true;
            }
            if (next >= range.to) {
                range = null;
                continue;
            }
            TopicPartition tp = new TopicPartition(range.topic, range.partition);
            List<ConsumerRecord<byte[], byte[]>> got = consumer.poll(Duration.ofMillis(500)).records(tp);
            if (got.isEmpty()) {
                // Offsets of aborted transactions or compacted records never arrive: the
                // position tells whether the range is done.
                long pos = consumer.position(tp);
                if (pos >= range.to) {
                    range = null;
                    continue;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(
                        "kafka at " + range.bootstrap + ": " + range.topic + "[" + range.partition
                        + "] offsets [" + range.from + ", " + range.to + ") not readable within "
                        + FETCH_TIMEOUT_MS / 1000 + "s (position " + pos
                        + "); were they deleted by retention?");
                }
            }
            buffered.addAll(got);
        }
    }

    @Override
    public InternalRow get() {
        return current;
    }

    @Override
    public void close() {
        if (consumer != null) {
            giveBack(ranges[0].bootstrap, consumer);
            consumer = null;
        }
    }
}
