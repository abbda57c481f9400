"""Kafka records into typed events or changes, each valid or with the reason it is not."""
