"""The tests' shared fixtures and helpers live in tests/support/, loaded here as pytest plugins.

`stack` is the real local stack (started once per session unless CDCPIPE_* variables name one), `outbox` an
outbox of a test's own; the helper modules are plugins too, so their asserts are rewritten like a test's.
"""

# Each after the ones it imports: pytest rewrites a plugin's asserts only if it loads it first.
pytest_plugins = [
    "tests.support.waits",
    "tests.support.kafka",
    "tests.support.stack",
    "tests.support.outbox",
    "tests.support.spark_host",
    "tests.support.relay",
    "tests.support.connectors",
    "tests.support.jobs",
    "tests.support.bench",
    "tests.support.timeline",
]
