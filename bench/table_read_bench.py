"""A table kind's read of its Kafka batch: a real table's changes, as Debezium's table connector sends them.

    python bench/table_read_bench.py [--changes 200000] [--runs 3]

Needs the stack running. A table of the run's own (common.TABLE_COLUMNS, 11 columns) is captured with
`cdcpipe tables add`; `--changes` upserts are committed in Postgres and published by Debezium, each with its
Connect schema, the way a table kind gets them. Then one Spark driver (`local[2]`, as a job runs by default) per
setting reads the whole topic as one batch, `--runs` times:
- `count_s`: the Kafka read alone (the records counted);
- `one_read_s`: what a table kind does with its batch before it parses it: `schema_change.apply.slim` into a
  cache, its shapes found (`observed`), every change counted from the cache. The driver's first read is its
  first batch (`first_batch_s`: its first record's shape met first, `meet_first`); the others are a running
  job's batches.
- `classify_s`: what the batch does next (the job's `classify.run`): every cached change parsed, converted to
  the contract's columns and checked (`classify.table_changes.classify`), into a cache of its own.
The settings: the jobs' fetches (`streaming_jobs.config.FETCH`, `shipped`), the Kafka consumer's defaults (1 MB a
partition, 500 records a poll, a 500 ms wait on the broker), 16 MB / 100,000, and the shipped fetches in a JVM
without its optimising compiler (`-XX:TieredStopAtLevel=1`, the flag the test suite gives its drivers).
`bare_changes`: the same changes as Debezium sends them with `value.converter.schemas.enable=false` (the payload
alone: the JSON converter writes the same bytes for it), copied into a topic of their own, read with the shipped
fetches; `value_bytes` says what each record carries either way. `broker_wait`: the shipped fetches with the
consumer's default wait on the broker (`fetch.max.wait.ms` 500, which the jobs set to 0): on a small batch
(`--changes 200`), what a quiet topic's read paid. `lz4_changes`: the changes with their schemas, copied by a
producer compressing batches of up to 1 MB with lz4 (Connect's `producer.compression.type=lz4`), read with the
shipped fetches. `poll_20000`: the shipped fetches with the cap a poll had before (20,000 records), which
ran a driver out of memory on the lz4 copy. Each figure is the median of its runs.
`--baseline DIR`: a checkout of another revision (`git worktree add DIR REV`) whose reading driver reads the same
topics right after this one's, each setting's figures under `baseline`, with `classify_ratio` (this one's
`classify_s` over the baseline's): what a change to the classification costs, same run, same changes.
Writes bench/results/table_read.json; prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from common import RESULTS, captured, commit_changes, create_bench_topics, env_kafka, stack_env
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from infra.config import StackSettings
from streaming_jobs.config import FETCH
from streaming_jobs.lake.paths import LakePath

DEFAULTS = {
    "kafka.max.partition.fetch.bytes": str(1 << 20),
    "kafka.max.poll.records": "500",
    "kafka.fetch.max.wait.ms": "500",
}
LARGE = {"kafka.max.partition.fetch.bytes": str(16 << 20), "kafka.max.poll.records": "100000"}
NO_C2 = "-XX:TieredStopAtLevel=1"
SETTINGS: dict[str, tuple[dict[str, str], str]] = {
    "shipped": (FETCH, ""),
    "consumer_defaults": (DEFAULTS, ""),
    "16mb_100k": (LARGE, ""),
    "shipped_without_c2": (FETCH, NO_C2),
    "bare_changes": (FETCH, ""),
    "lz4_changes": (FETCH, ""),
    "poll_20000": ({**FETCH, "kafka.max.poll.records": "20000"}, ""),
    "broker_wait": ({**FETCH, "kafka.fetch.max.wait.ms": "500"}, ""),
}
BARE = "bare_changes"  # the setting that reads the copy without schemas
# The settings that read a copy of the topic: its name's suffix, the copying producer's settings, whether the
# copy drops each value's schema. lz4: what Connect's producer sends with `producer.compression.type=lz4` (the
# copy's librdkafka producer batches up to 1 MB, as a worker with a larger `producer.batch.size` would).
COPIES: dict[str, tuple[str, dict[str, str], bool]] = {
    BARE: ("bare", {}, True),
    "lz4_changes": ("lz4", {"compression.type": "lz4"}, False),
}
ENVELOPE, PAYLOAD = b'{"schema":', b',"payload":'


def copy_topic(env: dict[str, str], topic: str, copy: str, producing: dict[str, str], strip: bool) -> dict[str, int]:
    """Copy `topic` into `copy` (created here, as many partitions), each value without its Connect schema if `strip`."""
    kafka = env_kafka(env)
    consumer = Consumer(kafka.client_config(**{"group.id": f"table-read-{uuid.uuid4().hex[:8]}"}))
    producer = Producer(kafka.client_config(**{"linger.ms": 20, **producing}))
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        create_bench_topics(kafka, [copy], len(partitions))
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        done: set[int] = {p for p, end in ends.items() if end == 0}
        counts = {"records": 0, "value_bytes_with_schema": 0, "value_bytes_without": 0}
        while len(done) < len(partitions):
            for message in consumer.consume(1000, timeout=5):
                if message.error():
                    raise SystemExit(f"reading {topic}: {message.error()}")
                value, partition, offset = message.value() or b"", message.partition() or 0, message.offset() or 0
                cut = value.find(PAYLOAD) if strip and value.startswith(ENVELOPE) else -1
                payload = value[cut + len(PAYLOAD) : -1] if cut >= 0 else value
                while True:
                    try:
                        producer.produce(copy, key=message.key(), value=payload, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
                counts["records"] += 1
                counts["value_bytes_with_schema"] += len(value)
                counts["value_bytes_without"] += len(payload)
                if offset + 1 >= ends[partition]:
                    done.add(partition)
        producer.flush()
    finally:
        consumer.close()
    return counts


def driver(topic: str, table: str, fetch: dict[str, str], runs: int) -> None:
    """In a driver of its own: time the reads, print one JSON line."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark only in the driver process

    from schemas.table_contracts import load_table_contract
    from streaming_jobs.classify import table_changes
    from streaming_jobs.config import JobsSettings
    from streaming_jobs.schema_change import apply
    from streaming_jobs.schema_change.shapes import contract_shape, parse_shape
    from streaming_jobs.spark_session import build_spark_session

    settings = JobsSettings.load(spark_master="local[2]")
    spark = build_spark_session(settings, app_name="table-read-bench")
    options = {**settings.kafka_reader_options(), **fetch}

    def records() -> Any:
        return (
            spark.read.format("kafka")
            .options(**options)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )

    def one_read() -> int:
        apply.meet_first(records())
        cache = apply.slim(records()).cache()
        try:
            apply.observed(cache)
            return int(cache.where(F.length(apply.PAYLOAD) > 0).count())
        finally:
            cache.unpersist()

    contract = load_table_contract(table)
    changes = apply.slim(records()).cache()
    # The table's columns never change here: each shape is read as it is (a bare change with the contract's), as
    # `apply.reconcile` plans it then.
    shapes = apply.observed(changes).shapes
    plans = {h: apply.Plan(contract_shape(contract) if text is None else parse_shape(text)) for h, text in shapes}

    def classify() -> int:
        classified = table_changes.classify(changes, contract, plans).cache()
        try:
            return int(classified.count())
        finally:
            classified.unpersist()

    def timed(read: Any) -> tuple[float, int]:
        began = time.monotonic()
        count = read()
        return time.monotonic() - began, int(count)

    first, read_count = timed(one_read)
    classified = timed(classify)[1]  # once before the runs: the first compiles the classification's code
    counts, reads, classifies = [], [], []
    for _ in range(runs):
        seconds, records_counted = timed(lambda: records().count())
        counts.append(seconds)
        reads.append(timed(one_read)[0])
        classifies.append(timed(classify)[0])
    changes.unpersist()
    spark.stop()
    print(
        json.dumps(
            {
                "first_batch_s": first,
                "count_s": counts,
                "one_read_s": reads,
                "classify_s": classifies,
                "records": records_counted,
                "read": read_count,
                "classified": classified,
            }
        )
    )


def measure(
    env: dict[str, str],
    source: tuple[str, str],
    fetch: dict[str, str],
    java: str,
    runs: int,
    checkout: Path | None = None,
) -> dict[str, Any]:
    """One driver's figures, reading `source` (topic, table) with these fetches and JVM options.

    `checkout`: the driver of that checkout's code (its modules first on the path), not this one's.
    """
    topic, table = source
    command = ["--driver", topic, "--table", table, "--fetch", json.dumps(fetch), "--runs", str(runs)]
    script, path = (
        (Path(__file__), env.get("PYTHONPATH"))
        if checkout is None
        else (checkout / "bench" / Path(__file__).name, str(checkout))
    )
    ran = subprocess.run(
        [sys.executable, str(script), *command],
        env={**env, "CDCPIPE_SPARK_JAVA_OPTIONS": java, **({"PYTHONPATH": path} if path else {})},
        capture_output=True,
        text=True,
        check=False,
    )
    if ran.returncode != 0:
        raise SystemExit(f"the reading driver failed:\n{ran.stderr[-3000:]}")
    found: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return {
        "fetch": fetch,
        "spark_java_options": java,
        "records": found["records"],
        "read": found["read"],
        "count_s": round(statistics.median(found["count_s"]), 2),
        "one_read_s": round(statistics.median(found["one_read_s"]), 2),
        "classify_s": round(statistics.median(found["classify_s"]), 2),
        "classified": found["classified"],
        "first_batch_s": round(found["first_batch_s"], 2),
        "count_s_runs": [round(s, 2) for s in found["count_s"]],
        "one_read_s_runs": [round(s, 2) for s in found["one_read_s"]],
        "classify_s_runs": [round(s, 2) for s in found["classify_s"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000, help="changes in the topic")
    parser.add_argument("--runs", type=int, default=3, help="reads of each kind per setting")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"which of {', '.join(SETTINGS)}")
    parser.add_argument(
        "--java-options", help="JVM options of every setting's driver instead of its own (a smoke run's cheaper JIT)"
    )
    parser.add_argument("--baseline", type=Path, help="a checkout of another revision to read the same topics with")
    parser.add_argument("--driver", help=argparse.SUPPRESS)  # the topic, in the reading driver
    parser.add_argument("--table", help=argparse.SUPPRESS)  # the captured table, whose contract it classifies with
    parser.add_argument("--fetch", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(args.driver, args.table, json.loads(args.fetch), args.runs)
        return
    unknown = set(args.settings.split(",")) - set(SETTINGS)
    if unknown or args.changes < 1 or args.runs < 1:
        parser.error(f"--settings among {', '.join(SETTINGS)} (not {sorted(unknown)}); --changes, --runs at least 1")
    env = {k: v for k, v in stack_env(StackSettings.load()).items() if k != "CDCPIPE_SPARK_JAVA_OPTIONS"}
    tag = uuid.uuid4().hex[:8]
    lake = LakePath(str(RESULTS / f"_table_read_{tag}"))
    result: dict[str, Any] = {"benchmark": "table_read", "changes": args.changes, "cores": os.cpu_count()}
    with captured(env, lake, tag, "mirror") as source:
        result["published"], took = commit_changes(source, args.changes)
        result["committed_and_published_s"] = round(took, 1)
        topics = {name: source.topic for name in SETTINGS}
        for name in set(args.settings.split(",")) & set(COPIES):
            suffix, producing, strip = COPIES[name]
            topics[name] = f"{source.topic}.{suffix}"
            copied = copy_topic(source.env, source.topic, topics[name], producing, strip)
            if name == BARE:
                result["value_bytes"] = {
                    "with_schema": round(copied["value_bytes_with_schema"] / copied["records"]),
                    "without": round(copied["value_bytes_without"] / copied["records"]),
                }
        for name in args.settings.split(","):
            fetch, java = SETTINGS[name]
            java = java if args.java_options is None else args.java_options
            print(f"table_read_bench: {name} ...", file=sys.stderr, flush=True)
            topic = topics[name]
            result[name] = measure(source.env, (topic, source.name), fetch, java, args.runs)
            if args.baseline is not None:
                print(f"table_read_bench: {name} in {args.baseline} ...", file=sys.stderr, flush=True)
                before = measure(source.env, (topic, source.name), fetch, java, args.runs, args.baseline)
                result.setdefault("baseline", {"checkout": str(args.baseline)})[name] = before
                result[name]["classify_ratio"] = round(result[name]["classify_s"] / before["classify_s"], 2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "table_read.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
