"""cdcpipe: change data capture from PostgreSQL through Kafka into Delta Lake.

This package is the command line (`cdcpipe.cli`), the top of the house: it parses, calls one stage function and
prints. The stages are packages of their own beside it; the ground they all stand on is `ground`.
"""
