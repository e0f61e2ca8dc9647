package arfl.source;

import java.util.concurrent.ConcurrentHashMap;

/** The oracles of this driver JVM, by the id the {@code oracle} option names. */
public final class Oracles {
    private static final ConcurrentHashMap<String, Oracle> BY_ID = new ConcurrentHashMap<>();

    private Oracles() {}

    public static void register(String id, Oracle oracle) {
        BY_ID.put(id, oracle);
    }

    public static void unregister(String id) {
        BY_ID.remove(id);
    }

    static Oracle get(String id) {
        Oracle o = BY_ID.get(id);
        if (o == null) {
            throw new IllegalStateException(
                "arfl-kafka-jvm: no boundary oracle '" + id + "' registered in this driver");
        }
        return o;
    }
}
