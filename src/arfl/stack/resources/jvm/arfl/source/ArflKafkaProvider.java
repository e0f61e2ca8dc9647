package arfl.source;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.readStream.format("arfl.source.ArflKafkaProvider")}: arfl's Kafka source with
 * replica-agreed batch boundaries, the same rows as the Python {@code arfl-kafka} source, read
 * on the executors by the JVM (no Python worker on the data path). Options: {@code bootstrap},
 * {@code topic}, {@code oracle} (the id of a registered {@link Oracle}).
 */
public final class ArflKafkaProvider implements TableProvider {
    static final StructType SCHEMA = new StructType()
        .add("key", DataTypes.StringType)
        .add("value", DataTypes.StringType)
        .add("topic", DataTypes.StringType)
        .add("partition", DataTypes.IntegerType)
        .add("offset", DataTypes.LongType)
        .add("timestamp", DataTypes.LongType)
        .add("late_before", DataTypes.LongType);

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
        return new KafkaTable();
    }

    static final class KafkaTable implements Table, SupportsRead {
        @Override
        public String name() {
            return "arfl-kafka-jvm";
        }

        @Override
        public StructType schema() {
            return SCHEMA;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            String bootstrap = require(options, "bootstrap");
            String topic = require(options, "topic");
            String oracle = require(options, "oracle");
            return () -> new Scan() {
                @Override
                public StructType readSchema() {
                    return SCHEMA;
                }

                @Override
                public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
                    return new ArflMicroBatchStream(bootstrap, topic, Oracles.get(oracle));
                }
            };
        }
    }

    static String require(CaseInsensitiveStringMap options, String key) {
        String v = options.get(key);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException("arfl-kafka-jvm: option '" + key + "' is required");
        }
        return v;
    }
}
