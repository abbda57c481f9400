"""Projections of our own: Python functions over each micro-batch, with the jobs' exactly-once writes."""
