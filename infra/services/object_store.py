"""An S3-compatible object store on loopback: s3proxy, serving the S3 API over a folder (jclouds' filesystem).

One bucket (`BUCKET`) is made at first start; the access key is `ACCESS_KEY`, the secret a generated stack
secret. Requests must be signed (AWS signature v2 or v4), as on any real object store.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from ground.private_files import write_private
from infra.config import StackSettings
from infra.errors import ServiceNotReadyError
from infra.service_user import hand_over, private_folder
from infra.services.base import PortSpec, Service, properties
from infra.stack_secrets import secret

BUCKET = "cdcpipe"
ACCESS_KEY = "cdcpipe"
REGION = "us-east-1"  # s3proxy accepts any; the SDKs want one

# s3proxy logs through logback, at DEBUG unless told: every request and Jetty's internals.
LOGBACK_XML = """\
<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>[%d] %level %msg \\(%logger{20}\\)%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="out"/></root>
  <logger name="org.gaul.s3proxy" level="INFO"/>
</configuration>
"""


def secret_key(settings: StackSettings) -> str:
    """The object store's secret access key (state/secrets/s3_secret_key)."""
    return secret(settings, "s3_secret_key")


class ObjectStore(Service):
    """s3proxy with the filesystem backend, its data in state/s3/<bucket>/."""

    name = "s3"
    system_user = "s3"

    @property
    def ports(self) -> list[PortSpec]:
        return [PortSpec(self.settings.s3_port, "CDCPIPE_S3_PORT")]

    @property
    def address(self) -> str:
        return self.settings.s3_endpoint

    @property
    def data_dir(self) -> Path:
        return self.settings.state / "s3"

    @property
    def config_file(self) -> Path:
        return self.settings.state / "conf" / "s3proxy.properties"

    def run_as(self) -> str | None:
        return self._own_user()

    def prepare(self) -> None:
        conf = self.settings.state / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "s3proxy-logback.xml").write_text(LOGBACK_XML)
        # A bucket of the filesystem backend is a folder; made here, it exists from the first start on. The backend
        # takes a folder others may read for a public-read bucket, served without a signature: 0700, both.
        for folder in (self.data_dir, self.data_dir / BUCKET):
            private_folder(folder)
        write_private(  # holds the secret key
            self.config_file,
            properties(
                {
                    "s3proxy.endpoint": self.settings.s3_endpoint,
                    "s3proxy.authorization": "aws-v2-or-v4",
                    "s3proxy.identity": ACCESS_KEY,
                    "s3proxy.credential": secret_key(self.settings),
                    "jclouds.provider": "filesystem-nio2",
                    # The backend's own login, which a folder does not check; the S3 clients' is s3proxy's above.
                    "jclouds.identity": "local",
                    "jclouds.credential": "local",
                    "jclouds.filesystem.basedir": str(self.data_dir),
                }
            ),
        )
        hand_over(self.run_as(), self.data_dir, self.config_file)
        self._hand_over_gc_log()

    def command(self) -> list[str]:
        conf = self.settings.state / "conf"
        return self._java(
            self.settings.s3_heap,
            self._jars(self.settings.lib / "s3proxy"),
            "org.gaul.s3proxy.Main",
            "--properties",
            str(self.config_file),
            options=[f"-Dlogback.configurationFile={conf / 's3proxy-logback.xml'}"],
        )

    def check_health(self) -> None:
        # An unsigned request must be refused with S3's own error: the server is up and checks signatures.
        try:
            response = httpx.get(f"{self.settings.s3_endpoint}/{BUCKET}", timeout=3)
        except httpx.HTTPError as exc:
            raise ServiceNotReadyError(f"s3: not answering on {self.settings.s3_endpoint} yet") from exc
        if response.status_code != 403 or "AccessDenied" not in response.text:
            raise ServiceNotReadyError(f"s3: an unsigned request got {response.status_code}, not S3's AccessDenied")
