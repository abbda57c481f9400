"""The local stack's services, one module each.

`CORE_SERVICES` start with `stack up`; `--spark-cluster` adds a `SparkMaster` and `SparkWorker`s.
"""

from __future__ import annotations

from infra.services.base import PortSpec, Service
from infra.services.collector import Collector
from infra.services.connect import Connect
from infra.services.kafka import Kafka
from infra.services.object_store import ObjectStore
from infra.services.postgres import Postgres
from infra.services.prometheus import Prometheus
from infra.services.spark import SparkMaster, SparkWorker

CORE_SERVICES: tuple[type[Service], ...] = (Postgres, Kafka, Connect, ObjectStore, Prometheus, Collector)

__all__ = [
    "CORE_SERVICES",
    "Collector",
    "Connect",
    "Kafka",
    "ObjectStore",
    "PortSpec",
    "Postgres",
    "Prometheus",
    "Service",
    "SparkMaster",
    "SparkWorker",
]
