package arfl.source;

import org.apache.spark.sql.connector.read.InputPartition;

/** One read task: ranges of one or more Kafka partitions, read one after the other. */
final class RangesPartition implements InputPartition {
    private static final long serialVersionUID = 1L;
    final KafkaRange[] ranges;

    RangesPartition(KafkaRange[] ranges) {
        this.ranges = ranges;
    }
}
