"""Topic files: what `cdcpipe topics apply` accepts, and what it refuses with the file and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.run import EXAMPLES
from schemas import topics
from schemas.errors import TopicError


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_the_shipped_files_declare_every_topic_the_shipped_jobs_read() -> None:
    from streaming_jobs.config import JobsSettings
    from streaming_jobs.jobs.spec import load_all

    declared = {spec.name for spec in topics.load(EXAMPLES / "topics").topics}
    read = {t for spec in load_all(list(JobsSettings.load().jobs_dirs)).values() for t in spec.topics}
    assert read <= declared, f"jobs read topics no file declares: {sorted(read - declared)}"


@pytest.mark.parametrize("name", ["outbox", "tables"])
def test_each_shipped_connectors_topic_file_lets_connect_make_the_topics_it_names_itself(
    name: str, tmp_path: Path
) -> None:
    """A user may apply one of the files alone (only the outbox, say): it must cover its connector's own topics.

    Debezium names its heartbeat topic `__debezium-heartbeat.<topic.prefix>` and writes it every
    `heartbeat.interval.ms`: a connector that may not, fails at its first heartbeat.
    """
    import json

    config = json.loads((EXAMPLES / "connectors" / f"{name}.json").read_text())["config"]
    prefix = config["topic.prefix"]
    (tmp_path / f"{name}.toml").write_text((EXAMPLES / "topics" / f"{name}.toml").read_text())
    grants = topics.load(tmp_path).prefixes
    for topic in (f"{prefix}.some_schema.some_table", f"__debezium-heartbeat.{prefix}"):
        covering = [g for g in grants if topic.startswith(g.prefix)]
        assert any("User:connect" in g.producers and "User:connect" in g.creators for g in covering), (
            f"examples/topics/{name}.toml does not let Connect create and write {topic}"
        )


def test_defaults_apply_and_an_entry_overrides_them(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.toml",
        '[defaults]\npartitions = 6\nreplication_factor = -1\n[defaults.config]\n"retention.ms" = "1000"\n'
        '[[topic]]\nname = "a.one"\n'
        '[[topic]]\nname = "a.two"\npartitions = 2\nconfig = { "cleanup.policy" = "compact" }\n',
    )
    one, two = topics.load(tmp_path).topics
    assert (one.name, one.partitions, one.replication_factor, one.config) == ("a.one", 6, -1, {"retention.ms": "1000"})
    assert (two.partitions, two.config) == (2, {"retention.ms": "1000", "cleanup.policy": "compact"})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[topic]]\nname = "bad/name"\npartitions = 1\nreplication_factor = 1\n', "not a legal topic name"),
        ('[[topic]]\nname = "t"\npartitions = 0\nreplication_factor = 1\n', "partitions = 0"),
        ('[[topic]]\nname = "t"\nreplication_factor = 1\n', "partitions = None"),
        ('[[topic]]\nname = "t"\npartitions = 1\nreplication_factor = 1\nconfig = { "retention.ms" = 5 }\n', "strings"),
        ('[[topic]]\nname = "t"\npartitions = 1\nreplication_factor = 1\nretention = 1\n', "unknown keys"),
        ("[topics]\n", "unknown sections"),
        ("[[topic]\n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_the_problem(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, "bad.toml", text)
    with pytest.raises(TopicError, match=says) as caught:
        topics.load(tmp_path)
    assert str(path) in str(caught.value)


def test_a_topic_declared_twice_is_refused(tmp_path: Path) -> None:
    entry = '[[topic]]\nname = "t"\npartitions = 1\nreplication_factor = 1\n'
    write(tmp_path, "a.toml", entry)
    write(tmp_path, "b.toml", entry)
    with pytest.raises(TopicError, match=r"declared in .*a\.toml already"):
        topics.load(tmp_path)
