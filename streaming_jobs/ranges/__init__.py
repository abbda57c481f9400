"""Re-running a job over a range of Kafka positions: backfill, replay, rewind, and reduced catch-up."""
