"""Offsets and positions in Kafka, and re-running a job over a range: backfill, replay, rewind."""
