"""The ground every stage stands on: the root exception, settings, the Kafka client's config, private files, processes.

Nothing here imports a stage or the CLI (`make lint` checks the layers).
"""
