"""cdcpipe: change data capture from PostgreSQL through Kafka into Delta Lake.

This package holds only what every stage shares: the root exception, where the local stack lives, how
settings are read, and the command line that dispatches to each stage.
"""
