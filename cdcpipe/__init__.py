"""cdcpipe: change data capture from PostgreSQL through Kafka into Delta Lake.

Two layers live here, at either end of the house: `cdcpipe.common` is the ground every stage stands on (the
root exception, settings, the Kafka client's config, private files, processes) and imports no stage;
`cdcpipe.cli` is the command line above every stage, which parses, calls one stage function and prints.
"""
