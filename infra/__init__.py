"""The local stack: pinned versions, install, start and stop of Postgres, Kafka, Connect and Spark."""
