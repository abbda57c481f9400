"""Spark Structured Streaming jobs: Kafka topics into Delta tables, checkpointed.

Sub-packages are layered (`[tool.importlinter]` in pyproject.toml, checked by `make lint`), top to bottom:
`ranges` (backfill, replay, rewind) over `run` (the runner, background jobs) over `sinks` (a batch into each
kind's table) over `once` (applying each offset once) over `classify`, `schema_change`, `jobs` (job files),
then the Spark session, settings, the lake, and the shared vocabulary (`offsets`, `phases`, `errors`).
"""
