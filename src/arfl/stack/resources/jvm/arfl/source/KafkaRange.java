package arfl.source;

import java.io.Serializable;

/**
 * {@code [from, to)} of one Kafka partition, and the agreed watermark of each agreed batch in it
 * ({@code lateFirsts[i]}: the batch's first offset, {@code lateValues[i]}: its
 * {@code late_before}, null: none). Empty arrays: the {@code late_before} column is null.
 */
final class KafkaRange implements Serializable {
    private static final long serialVersionUID = 1L;
    final String bootstrap;
    final String topic;
    final int partition;
    final long from;
    final long to;
    final long[] lateFirsts;
    final Long[] lateValues;

    KafkaRange(String bootstrap, String topic, int partition, long from, long to,
               long[] lateFirsts, Long[] lateValues) {
        this.bootstrap = bootstrap;
        this.topic = topic;
        this.partition = partition;
        this.from = from;
        this.to = to;
        this.lateFirsts = lateFirsts;
        this.lateValues = lateValues;
    }

    /** The late_before of the row at {@code offset}: its agreed batch's (the last first <= it). */
    Long lateBefore(long offset) {
        if (lateFirsts.length == 0) {
            return null;
        }
        int lo = 0;
        int hi = lateFirsts.length;  // first index with lateFirsts[i] > offset
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (lateFirsts[mid] <= offset) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lateValues[Math.max(0, lo - 1)];
    }
}
