"""Our own outbox publisher: outbox rows -> Kafka, in the wire format of Debezium's Outbox Event Router."""
