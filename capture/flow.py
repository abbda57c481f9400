"""Which Debezium connector writes a job's topics, and whether it runs.

A job's "lag 0" means nothing when the connector feeding it has failed, so `jobs status` shows the writer's
state beside it, and a warning when it is not running.

A Postgres connector writes `<topic.prefix>.<schema>.<table>` for each table its include list matches; an
outbox connector (Debezium's EventRouter) writes the topics its `route.topic.replacement` names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from capture import connector
from connectors import commands as connector_commands
from connectors.client import ConnectClient
from connectors.config import ConnectSettings
from connectors.errors import ConnectError

EVENT_ROUTER = "io.debezium.transforms.outbox.EventRouter"
DEFAULT_ROUTE = "outbox.event.${routedByValue}"


@dataclass(frozen=True)
class Source:
    """A connector writing one of a job's topics, as Connect reports it."""

    topic: str
    connector: str
    state: str
    tasks: tuple[str, ...]
    advice: tuple[str, ...]

    @property
    def flowing(self) -> bool:
        return self.state == "RUNNING" and bool(self.tasks) and all(t == "RUNNING" for t in self.tasks)

    def line(self) -> str:
        said = f"{self.topic} <- connector {self.connector}: {self.state}, tasks {','.join(self.tasks) or 'none'}"
        if self.flowing:
            return said
        fix = "; ".join(self.advice) or f"`cdcpipe connectors status {self.connector}` says why"
        return f"WARNING {said}: nothing new reaches this topic, so a lag of 0 is not caught up. {fix}"


def writes(config: dict[str, str], topic: str) -> bool:
    """Whether a connector of this config writes `topic`."""
    if "postgres" in config.get("connector.class", "").lower():
        prefix = config.get("topic.prefix", "")
        if topic.startswith(f"{prefix}.") and connector.captured_by(config, topic[len(prefix) + 1 :]):
            return True
    for name in (t.strip() for t in config.get("transforms", "").split(",") if t.strip()):
        if config.get(f"transforms.{name}.type") == EVENT_ROUTER:
            route = config.get(f"transforms.{name}.route.topic.replacement", DEFAULT_ROUTE)
            pattern = ".+".join(re.escape(part) for part in route.split("${routedByValue}"))
            if re.fullmatch(pattern, topic):
                return True
    return False


def sources(settings: ConnectSettings, topics: list[str]) -> list[Source] | str:
    """The connectors writing `topics`, with their states; a sentence instead when Connect cannot say."""
    try:
        with ConnectClient(settings) as client:
            found = []
            for name in client.connectors():
                config = client.config(name) or {}
                for topic in topics:
                    if writes(config, topic):
                        report = connector_commands.status(client, settings, name)
                        tasks = tuple(t.state for t in report.tasks)
                        found.append(Source(topic, name, report.state, tasks, tuple(report.advice)))
            return found
    except ConnectError as exc:
        return f"the connectors writing its topics are unknown: {exc}"
