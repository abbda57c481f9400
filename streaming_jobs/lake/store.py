"""Where an object-store lake is and how to sign in (`[object_store]`, `CDCPIPE_S3_*`, else the standard `AWS_*`).

Unset, each setting falls back to the variable every AWS SDK, CLI and delta-rs reads (`AWS_ENDPOINT_URL`,
`AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`); with no keys at all, Spark's S3A and the
driver's own reads use the default credential chain (instance profile, web identity, ...).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, model_validator

from ground.settings import StageSettings

if TYPE_CHECKING:  # pyarrow is imported where a store is reached: every `cdcpipe` command imports this module
    from pyarrow import fs as pafs

# Setting -> the standard variable it falls back to.
AWS_FALLBACKS = {
    "s3_endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "s3_region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "s3_access_key_id": ("AWS_ACCESS_KEY_ID",),
    "s3_secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
}


class ObjectStoreSettings(StageSettings):
    """The S3 API a `s3a://` lake is reached through."""

    toml_section: ClassVar[str] = "object_store"

    s3_endpoint: str | None = Field(
        None,
        description="endpoint URL of an S3-compatible store (http://host:port); unset: AWS_ENDPOINT_URL, else AWS S3",
    )
    s3_region: str | None = Field(None, description="region of the bucket; unset: AWS_REGION")
    s3_access_key_id: str | None = Field(
        None, description="access key id; unset: AWS_ACCESS_KEY_ID, else the default credential chain"
    )
    s3_secret_access_key: SecretStr | None = Field(
        None, description="secret access key (secret: never printed); unset: AWS_SECRET_ACCESS_KEY"
    )

    @model_validator(mode="before")
    @classmethod
    def _standard_variables(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        for name, variables in AWS_FALLBACKS.items():
            if filled.get(name) is None:
                found = next((os.environ[v] for v in variables if os.environ.get(v)), None)
                if found is not None:
                    filled[name] = found
        return filled

    def environment(self) -> dict[str, str]:
        """These settings as CDCPIPE_S3_* variables, for a process started with what this one read."""
        values = {
            "CDCPIPE_S3_ENDPOINT": self.s3_endpoint,
            "CDCPIPE_S3_REGION": self.s3_region,
            "CDCPIPE_S3_ACCESS_KEY_ID": self.s3_access_key_id,
            "CDCPIPE_S3_SECRET_ACCESS_KEY": self.s3_secret_access_key.get_secret_value()
            if self.s3_secret_access_key
            else None,
        }
        return {k: v for k, v in values.items() if v is not None}

    @property
    def secure(self) -> bool:
        """TLS to the store: always for AWS S3, and for an endpoint given as https://."""
        return self.s3_endpoint is None or urlsplit(self.s3_endpoint).scheme != "http"

    def hadoop_conf(self) -> dict[str, str]:
        """Spark settings for S3A (`spark.hadoop.fs.s3a.*`); the secret is redacted by spark.redaction.regex."""
        conf: dict[str, str] = {}
        if self.s3_endpoint:
            conf["fs.s3a.endpoint"] = self.s3_endpoint
            # A custom endpoint serves buckets under its own host name, not as bucket.host sub-domains.
            conf["fs.s3a.path.style.access"] = "true"
        conf["fs.s3a.connection.ssl.enabled"] = str(self.secure).lower()
        if self.s3_region:
            conf["fs.s3a.endpoint.region"] = self.s3_region
        if self.s3_access_key_id and self.s3_secret_access_key:
            conf["fs.s3a.access.key"] = self.s3_access_key_id
            conf["fs.s3a.secret.key"] = self.s3_secret_access_key.get_secret_value()
            conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return {f"spark.hadoop.{k}": v for k, v in conf.items()}

    def delta_rs_options(self) -> dict[str, str]:
        """The same store as delta-rs's `storage_options` (what a reader of the tables passes)."""
        options: dict[str, str] = {}
        if self.s3_endpoint:
            options["AWS_ENDPOINT_URL"] = self.s3_endpoint
            options["AWS_ALLOW_HTTP"] = str(not self.secure).lower()
        if self.s3_region:
            options["AWS_REGION"] = self.s3_region
        if self.s3_access_key_id and self.s3_secret_access_key:
            options["AWS_ACCESS_KEY_ID"] = self.s3_access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.s3_secret_access_key.get_secret_value()
        return options

    def filesystem(self) -> pafs.FileSystem:
        """The driver's own client of the store (small files: pointers, progress, the Delta log's newest commits)."""
        secret = self.s3_secret_access_key.get_secret_value() if self.s3_secret_access_key else None
        return _s3(self.s3_endpoint, self.s3_region, self.s3_access_key_id, secret)


@lru_cache(maxsize=8)
def _s3(endpoint: str | None, region: str | None, key_id: str | None, secret: str | None) -> pafs.FileSystem:
    from pyarrow import fs as pafs

    options: dict[str, Any] = {"region": region or "us-east-1"}
    if endpoint:
        parts = urlsplit(endpoint)
        options["endpoint_override"] = parts.netloc or parts.path
        options["scheme"] = parts.scheme or "https"
    if key_id and secret:
        options["access_key"] = key_id
        options["secret_key"] = secret
    # A write completes when its stream closes (a PUT, or a multipart upload completed): an S3 object is
    # visible whole or not at all, and a caller that returns has it stored.
    return pafs.S3FileSystem(**options, background_writes=False)


@dataclass(frozen=True)
class LakeAccess:
    """What reaching a lake takes besides its URL: the object store's settings, the Postgres of its writer leases."""

    store: ObjectStoreSettings
    lease_dsn: str | None = None
    lease_wait_s: float = 900.0  # how long a writer waits for the lease another holds
