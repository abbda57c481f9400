"""`cdcpipe tables`: capture a Postgres table in one command, and undo it.

Stands above the stages and calls each for its part: the publication and grants (schemas), the row
contract (schemas), the topic and its ACLs (schemas.topics), the table connector's include list
(connectors), the job files and their submission (streaming_jobs), and Debezium's incremental snapshot of
the rows the table already holds. Each part is planned first (`--dry-run` prints the plan) and changes
only what differs, so running a command twice changes nothing the second time.
"""
