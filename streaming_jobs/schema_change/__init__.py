"""Changes of a captured table's columns, met by its mirror and history jobs (docs/schema-changes.md)."""
