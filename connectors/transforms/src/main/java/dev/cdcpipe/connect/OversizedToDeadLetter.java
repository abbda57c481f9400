package dev.cdcpipe.connect;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.kafka.common.config.AbstractConfig;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.connect.components.Versioned;
import org.apache.kafka.connect.connector.ConnectRecord;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.json.JsonConverterConfig;
import org.apache.kafka.connect.storage.ConverterType;
import org.apache.kafka.connect.transforms.Transformation;

/**
 * Sends a record too large for its topic to a dead-letter topic instead, as a small record that names it.
 *
 * <p>A record above the topic's {@code max.message.bytes} can never be written: the producer's error fails
 * the source task, and a failed Debezium task stops reading its replication slot, which then holds WAL until
 * someone acts. Connect's {@code errors.tolerance=all} would skip it, but for a source connector it also skips
 * records refused for a missing ACL, silently. This transform acts on size alone: it measures the record as
 * the worker will write it (value as JSON without schemas, key and headers as UTF-8 text) and, above
 * {@code max.bytes}, replaces it with a record on {@code topic} that keeps its key and headers (the outbox
 * event's {@code id}, {@code eventType}) and says where it was going, how large it was, and why. The payload
 * itself is not carried (it is what did not fit); it stays in the application's outbox table.
 *
 * <p>Put it after the EventRouter, so the size measured is the size of the record published. Set
 * {@code max.bytes} below the smallest {@code max.message.bytes} of the topics it guards, leaving room for
 * Kafka's per-batch overhead (a few hundred bytes).
 */
public final class OversizedToDeadLetter<R extends ConnectRecord<R>> implements Transformation<R>, Versioned {

    public static final String MAX_BYTES = "max.bytes";
    public static final String TOPIC = "topic";

    private static final ConfigDef CONFIG = new ConfigDef()
            .define(MAX_BYTES, ConfigDef.Type.INT, 1_000_000, ConfigDef.Range.atLeast(1024), ConfigDef.Importance.HIGH,
                    "A record larger than this (value as schemaless JSON, plus key and headers) goes to the dead-letter topic")
            .define(TOPIC, ConfigDef.Type.STRING, ConfigDef.NO_DEFAULT_VALUE, new ConfigDef.NonEmptyString(),
                    ConfigDef.Importance.HIGH, "The dead-letter topic");

    private int maxBytes;
    private String topic;
    private JsonConverter json;

    @Override
    public void configure(Map<String, ?> props) {
        AbstractConfig config = new AbstractConfig(CONFIG, props);
        maxBytes = config.getInt(MAX_BYTES);
        topic = config.getString(TOPIC);
        json = new JsonConverter();
        json.configure(Map.of(
                JsonConverterConfig.SCHEMAS_ENABLE_CONFIG, "false",
                JsonConverterConfig.TYPE_CONFIG, ConverterType.VALUE.getName()));
    }

    @Override
    public R apply(R record) {
        if (record.value() == null) {
            return record; // a tombstone is a few bytes
        }
        long size = size(record);
        if (size <= maxBytes) {
            return record;
        }
        Map<String, Object> letter = new LinkedHashMap<>();
        letter.put("error", "record of " + size + " bytes is above " + MAX_BYTES + " " + maxBytes
                + " (the topic's max.message.bytes): it cannot be published; raise the topic's limit and "
                + MAX_BYTES + ", then publish the event again from the outbox table");
        letter.put("topic", record.topic());
        letter.put("bytes", size);
        letter.put("max_bytes", maxBytes);
        return record.newRecord(topic, null, record.keySchema(), record.key(), null, letter, record.timestamp(),
                record.headers());
    }

    private long size(R record) {
        byte[] value = json.fromConnectData(record.topic(), record.valueSchema(), record.value());
        long size = value == null ? 0 : value.length;
        if (record.key() != null) {
            size += utf8(record.key());
        }
        for (Header header : record.headers()) {
            size += utf8(header.key()) + (header.value() == null ? 0 : utf8(header.value()));
        }
        return size;
    }

    private static long utf8(Object text) {
        return String.valueOf(text).getBytes(StandardCharsets.UTF_8).length;
    }

    @Override
    public ConfigDef config() {
        return CONFIG;
    }

    @Override
    public String version() {
        return "1";
    }

    @Override
    public void close() {
        if (json != null) {
            json.close();
        }
    }
}
