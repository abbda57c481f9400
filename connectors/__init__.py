"""Debezium connectors on Kafka Connect: definitions (versioned files), the REST client, replication slots."""
