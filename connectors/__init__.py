"""Debezium connector definitions (versioned files) and the Kafka Connect REST client (issue 5)."""
