"""Outbox DDL and roles, event contracts and Delta table schemas: the source of truth every stage imports."""
