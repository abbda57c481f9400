"""Spark Structured Streaming jobs: Kafka topics into Delta tables, checkpointed."""
