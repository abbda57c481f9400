"""A Delta table's rows as JSON on stdout, read by Spark with Delta: for a table delta-rs cannot read.

    python -m tests.support.spark_read PATH

Run through `spark_run`, it reads on the test process's shared driver instead of starting one.
"""

from __future__ import annotations

import json
import sys

from streaming_jobs.spark_session import build_spark_session


def main(argv: list[str]) -> int:
    spark = build_spark_session(app_name="test-read")
    rows = [r.asDict() for r in spark.read.format("delta").load(argv[0]).collect()]
    print(json.dumps(rows, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
