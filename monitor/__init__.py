"""Watching the pipeline: the collector (Prometheus metrics) and `cdcpipe status` (one screen).

It reads Kafka Connect, Postgres, the relay's tables and the jobs' run folder; it changes nothing.
"""
