package arfl.source;

/**
 * Where the replicas' agreed batches start and end: implemented in Python (arfl's boundary
 * policies, through Py4J's callback server in the driver), called by {@link ArflMicroBatchStream}
 * on Spark's stream execution thread. Offsets are JSON strings; equal positions give equal
 * strings (Spark compares offsets by their JSON).
 */
public interface Oracle {
    /** The first batch's start. */
    String initialOffset();

    /** The end of the batch starting at {@code start}; {@code start} itself for no batch. */
    String latestOffset(String start);

    /**
     * The read tasks of {@code [start, end)}: a JSON list of tasks, each a list of ranges
     * {@code [partition, from, to, [[first offset, late_before or null], ...]]}.
     */
    String partitions(String start, String end);

    /** The query stopped. */
    void stop();
}
