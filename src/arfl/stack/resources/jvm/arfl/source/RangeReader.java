package arfl.source;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
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
    private static final AtomicInteger CONSUMERS = new AtomicInteger();
    private static final ConcurrentHashMap<String, ConcurrentLinkedQueue<KafkaConsumer<byte[], byte[]>>>
        POOL = new ConcurrentHashMap<>();

    private final KafkaRange[] ranges;
    private int rangeIndex = -1;
    private KafkaRange range;
    private UTF8String topic;
    private KafkaConsumer<byte[], byte[]> consumer;
    private final ArrayDeque<ConsumerRecord<byte[], byte[]>> buffered = new ArrayDeque<>();
    private long next;
    private long deadlineNanos;
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
        p.put(ConsumerConfig.CLIENT_ID_CONFIG,
            "arfl-jvm-reader-" + ProcessHandle.current().pid() + "-" + CONSUMERS.incrementAndGet());
        // As the Python reader's librdkafka (its default): records of aborted transactions are
        // never rows, and the driver's event-time scan (late.group_maxes) sees the same records.
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
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
            topic = UTF8String.fromString(r.topic);  // once per range, not per row
            next = r.from;
            deadlineNanos = System.nanoTime() + FETCH_TIMEOUT_MS * 1_000_000L;
            buffered.clear();
            return true;
        }
        return false;
    }

    private static boolean isMarker(ConsumerRecord<byte[], byte[]> rec) {
        Iterator<Header> it = rec.headers().headers(MARKER_HEADER).iterator();
        return it.hasNext();
    }

    /** The bytes as text, invalid UTF-8 replaced by U+FFFD as the Python reader's
     * {@code decode("utf-8", errors="replace")} does it (one per maximal invalid subpart, the
     * Unicode practice; Java's own decoder replaces some sequences, e.g. an encoded surrogate,
     * with one U+FFFD where Python writes three). */
    static UTF8String text(byte[] b) {
        if (b == null) {
            return null;
        }
        UTF8String s = UTF8String.fromBytes(b);
        return s.isValid() ? s : UTF8String.fromString(decodeReplacing(b));
    }

    static String decodeReplacing(byte[] b) {
        StringBuilder sb = new StringBuilder(b.length);
        int i = 0;
        while (i < b.length) {
            int c = b[i] & 0xff;
            if (c < 0x80) {
                sb.append((char) c);
                i++;
                continue;
            }
            int need;
            int cp;
            int lo = 0x80;
            int hi = 0xBF;
            if (c >= 0xC2 && c <= 0xDF) {
                need = 1;
                cp = c & 0x1F;
            } else if (c >= 0xE0 && c <= 0xEF) {
                need = 2;
                cp = c & 0x0F;
                lo = c == 0xE0 ? 0xA0 : 0x80;
                hi = c == 0xED ? 0x9F : 0xBF;
            } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3;
                cp = c & 0x07;
                lo = c == 0xF0 ? 0x90 : 0x80;
                hi = c == 0xF4 ? 0x8F : 0xBF;
            } else {
                sb.append('\uFFFD');
                i++;
                continue;
            }
            int j = i + 1;
            boolean ok = true;
            for (int k = 0; k < need; k++, j++) {
                int d = j < b.length ? b[j] & 0xff : -1;
                if (d < (k == 0 ? lo : 0x80) || d > (k == 0 ? hi : 0xBF)) {
                    ok = false;
                    break;
                }
                cp = (cp << 6) | (d & 0x3F);
            }
            if (ok) {
                sb.appendCodePoint(cp);
            } else {
                sb.append('\uFFFD');  // the valid prefix before the bad byte
            }
            i = j;
        }
        return sb.toString();
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
                    text(rec.key()), text(rec.value()), topic,
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
                if (System.nanoTime() - deadlineNanos > 0) {
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
