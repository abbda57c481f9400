"""Settings of Spark sessions and jobs (`[spark]` in the settings file, `CDCPIPE_*` in the environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from cdcpipe.home import default_home
from cdcpipe.kafka_client import KafkaSettings
from cdcpipe.settings import StageSettings, split_list


class SparkSettings(StageSettings):
    """How a SparkSession of cdcpipe is built. Jars come from disk; nothing is downloaded at run time."""

    toml_section: ClassVar[str] = "spark"

    spark_master: str = Field("local[2]", description="where jobs run: local[N] or spark://HOST:PORT")
    spark_jars_dir: Path = Field(
        default_factory=lambda: default_home() / "lib" / "spark",
        description="folder of the Kafka source and Delta jars (installed by `make install`)",
    )
    spark_driver_memory: str = Field("2g", description="driver JVM heap")
    spark_executor_memory: str = Field("1g", description="executor heap on a standalone cluster")
    spark_cores_max: int = Field(
        1,
        ge=1,
        description="cores one job takes on a standalone cluster (spark.cores.max); without a cap the first job "
        "takes every core and the next waits",
    )
    spark_authenticate_secret_file: Path | None = Field(
        None,
        description="file holding the standalone cluster's shared secret (spark.authenticate); for spark:// masters",
    )
    spark_shuffle_partitions: int = Field(
        2, ge=1, description="spark.sql.shuffle.partitions (one per core: micro-batches are small)"
    )
    spark_ui: bool = Field(False, description="serve the Spark UI on 127.0.0.1:4040")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings.load, description="the cluster ([kafka])")
    jobs_dirs: Annotated[tuple[Path, ...], NoDecode] = Field(
        (Path(__file__).parent / "definitions",),
        description="folders of job files (colon-separated); the built-in examples by default",
    )
    lake: Path = Field(
        default_factory=lambda: default_home() / "state" / "lake",
        description="root folder of Delta tables and checkpoints",
    )

    @field_validator("jobs_dirs", mode="before")
    @classmethod
    def _colon_separated(cls, value: object) -> object:
        return split_list(value, ":")

    @field_validator("lake", mode="before")
    @classmethod
    def _a_folder(cls, value: object) -> object:
        # A URL taken as a Path would become a relative folder named "s3a:" beside wherever the job started.
        if isinstance(value, str) and "://" in value:
            raise ValueError(
                f"{value!r} is a URL, and the jobs' lake is a local folder for now (the writer's lock and the applied "
                "offsets are read through the file system): set CDCPIPE_LAKE to a folder; object-store lakes are "
                "not supported yet"
            )
        return value
