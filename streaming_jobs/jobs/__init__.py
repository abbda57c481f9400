"""Job definitions and where each job keeps its tables, checkpoint and topics."""
