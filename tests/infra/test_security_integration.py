"""The stack locked down as production runs it: Kafka with TLS, SASL and ACLs; Connect and Spark authenticated."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ground.kafka_client import read_properties, write_properties
from infra import tls
from tests.support.stack import Stack, cdcpipe

pytestmark = pytest.mark.integration


def client_file(stack: Stack, tmp_path: Path, **changes: str) -> Path:
    """The admin's client file with some settings changed (a wrong password, another CA...)."""
    values = {**read_properties(stack.kafka_file()), **changes}
    path = tmp_path / "client.properties"
    write_properties(path, values)
    return path


def topics_apply(stack: Stack, kafka_config: Path, tmp_path: Path) -> tuple[int, str]:
    """`cdcpipe topics apply` with a client file: a command that must reach and authenticate to Kafka."""
    folder = tmp_path / "topics"
    folder.mkdir(exist_ok=True)
    (folder / "t.toml").write_text('[[topic]]\nname = "security.check"\npartitions = 1\nreplication_factor = 1\n')
    env = {**stack.process_env(), "CDCPIPE_KAFKA_CONFIG": str(kafka_config), "CDCPIPE_TOPICS_DIR": str(folder)}
    result = cdcpipe("topics", "apply", env=env, timeout=120)
    return result.returncode, result.stdout + result.stderr


def test_a_client_without_tls_and_sasl_gets_nothing(stack: Stack) -> None:
    admin = AdminClient({"bootstrap.servers": stack.kafka_bootstrap, "security.protocol": "PLAINTEXT"})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


def test_a_wrong_password_is_said_as_such(stack: Stack, tmp_path: Path) -> None:
    code, output = topics_apply(stack, client_file(stack, tmp_path, **{"sasl.password": "wrong"}), tmp_path)
    assert code != 0
    assert "authentication failed" in output
    assert "CDCPIPE_KAFKA_CONFIG" in output, "the message says where the credentials come from"


def test_a_broker_certificate_from_another_ca_is_refused(stack: Stack, tmp_path: Path) -> None:
    other = tmp_path / "other-ca"
    tls.ensure(other)  # a CA of its own: the stack's broker certificate is not signed by it
    code, output = topics_apply(
        stack, client_file(stack, tmp_path, **{"ssl.ca.location": str(other / "ca.pem")}), tmp_path
    )
    assert code != 0
    assert "TLS handshake failed: certificate signature failure" in output, output
    assert "ssl.ca.location" in output


def test_an_expired_certificate_is_said_as_such(stack: Stack, tmp_path: Path) -> None:
    """The stack's own CA, re-issued with the same key and name but valid only until yesterday."""
    folder = stack.home / "state" / "tls"
    ca = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    now = dt.datetime.now(dt.UTC)
    builder = x509.CertificateBuilder(
        subject_name=ca.subject,
        issuer_name=ca.subject,
        public_key=ca.public_key(),
        serial_number=x509.random_serial_number(),
        not_valid_before=now - dt.timedelta(days=30),
        not_valid_after=now - dt.timedelta(days=1),
        extensions=list(ca.extensions),
    )
    path = tmp_path / "expired-ca.pem"
    path.write_bytes(builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    code, output = topics_apply(stack, client_file(stack, tmp_path, **{"ssl.ca.location": str(path)}), tmp_path)
    assert code != 0
    assert "TLS handshake failed: certificate has expired" in output, output
    assert "ssl.ca.location" in output


def test_each_component_may_do_only_its_part(stack: Stack, topic: str) -> None:
    """The jobs' user reads topics; it may not write one (the relay's and Connect's users may)."""
    failures: list[KafkaError | None] = []
    producer = Producer(stack.kafka("jobs").client_config(**{"message.timeout.ms": 10_000}))
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: failures.append(err))
    producer.flush(20)
    assert [f.code() if f else None for f in failures] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    sent: list[KafkaError | None] = []
    producer = Producer(stack.kafka("relay").client_config(acks="all"))
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: sent.append(err))
    producer.flush(20)
    assert sent == [None]


def test_kcat_reads_with_the_exported_client_file_as_it_is(stack: Stack, topic: str) -> None:
    producer = Producer(stack.kafka_config(acks="all"))
    producer.produce(topic, b"over TLS and SASL", key=b"k")
    assert producer.flush(20) == 0
    out = subprocess.run(
        [stack.kcat, "-F", stack.env["CDCPIPE_KAFKA_CONFIG"], "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.splitlines() == ["over TLS and SASL"]


def test_connect_refuses_a_caller_without_credentials_and_the_cli_says_how_to_authenticate(stack: Stack) -> None:
    assert httpx.get(f"{stack.connect_url}/connectors", timeout=10).status_code == 401
    assert httpx.get(f"{stack.connect_url}/connectors", timeout=10, auth=("admin", "wrong")).status_code == 401
    assert httpx.get(f"{stack.connect_url}/connectors", timeout=10, auth=stack.connect_auth()).status_code == 200
    env = {
        k: v
        for k, v in stack.process_env().items()
        if k not in ("CDCPIPE_CONNECT_USER", "CDCPIPE_CONNECT_PASSWORD_FILE", "CDCPIPE_CONNECT_PASSWORD")
    }
    result = cdcpipe("connectors", "list", env=env)
    assert result.returncode != 0
    assert "401" in result.stderr
    assert "CDCPIPE_CONNECT_USER and CDCPIPE_CONNECT_PASSWORD_FILE" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_collectors_connect_user_may_read_and_restart_a_task_and_nothing_else(stack: Stack) -> None:
    """Connect's basic auth has no per-user rights; cdcpipe's REST extension limits the collector's `monitor` user."""
    password = (stack.home / "state" / "collector" / "connect-rest-password").read_text().strip()
    monitor, url = ("monitor", password), stack.connect_url
    assert httpx.get(f"{url}/connectors", timeout=10, auth=monitor).status_code == 200
    assert httpx.get(f"{url}/connectors", timeout=10, auth=("monitor", "wrong")).status_code == 401
    # A task restart is the one write allowed: the connector does not exist, so Connect itself answers 404.
    assert httpx.post(f"{url}/connectors/nobody/tasks/0/restart", timeout=10, auth=monitor).status_code == 404
    refused = [
        httpx.post(f"{url}/connectors", json={"name": "x", "config": {}}, timeout=10, auth=monitor),
        httpx.put(f"{url}/connectors/x/config", json={}, timeout=10, auth=monitor),
        httpx.delete(f"{url}/connectors/x", timeout=10, auth=monitor),
        httpx.delete(f"{url}/connectors/x/offsets", timeout=10, auth=monitor),
        httpx.post(f"{url}/connectors/x/restart", timeout=10, auth=monitor),
        httpx.put(f"{url}/connectors/x/pause", timeout=10, auth=monitor),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused), [r.text for r in refused]
    assert "user 'monitor' may only read (GET) and restart a task" in refused[0].json()["message"]
    # The admin the CLI uses is not limited: the same create reaches Connect's own validation.
    assert (
        httpx.post(
            f"{url}/connectors", json={"name": "x", "config": {}}, timeout=10, auth=stack.connect_auth()
        ).status_code
        == 400
    )


def test_the_stack_secrets_and_client_files_are_its_owners_alone(stack: Stack) -> None:
    state = stack.home / "state"
    private = [
        stack.kafka_file(),
        stack.kafka_file("relay"),
        state / "tls" / "broker.pem",
        state / "tls" / "ca.key",
        state / "conf" / "server.properties",
        state / "conf" / "connect-distributed.properties",
        state / "conf" / "connect-rest-users.properties",
    ]
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in private} == {str(p): oct(0o600) for p in private}


SPARK_APP = """
import pathlib, sys
from pyspark.sql import SparkSession
builder = (
    SparkSession.builder.master(sys.argv[1]).appName(sys.argv[2])
    .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    .config("spark.cores.max", "1").config("spark.executor.cores", "1")
)
if len(sys.argv) > 3:  # the secret's file
    builder = builder.config("spark.authenticate", "true")
    builder = builder.config("spark.authenticate.secret", pathlib.Path(sys.argv[3]).read_text().strip())
print("rows", builder.getOrCreate().range(10).count(), flush=True)
"""


def spark_app(stack: Stack, script: Path, name: str, *secret: str) -> subprocess.Popen[str]:
    """The application, started; `communicate()` gives what it printed."""
    assert stack.cluster
    return subprocess.Popen(
        [sys.executable, str(script), stack.cluster, name, *secret],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**stack.process_env(), "SPARK_LOCAL_IP": "127.0.0.1"},
    )


def test_the_spark_cluster_admits_only_applications_that_know_its_secret(stack: Stack, tmp_path: Path) -> None:
    if not stack.cluster:
        pytest.skip("no Spark standalone master in this stack (cdcpipe stack up --spark-cluster)")
    secret_file = Path(stack.env["CDCPIPE_SPARK_AUTHENTICATE_SECRET_FILE"])
    assert secret_file.stat().st_mode & 0o777 == 0o600
    script = tmp_path / "app.py"
    script.write_text(SPARK_APP)
    # The refused one retries its registration for a minute before it gives up (Spark's own 3 x 20 s): the two
    # run side by side.
    refused = spark_app(stack, script, f"without-{tmp_path.name}")
    admitted = spark_app(stack, script, f"with-{tmp_path.name}", str(secret_file))
    admitted_out, admitted_err = admitted.communicate(timeout=240)
    assert "rows 10" in admitted_out, admitted_err[-3000:]
    refused_out, _ = refused.communicate(timeout=240)
    assert "rows 10" not in refused_out, refused_out
    master = httpx.get("http://127.0.0.1:8080/json/", timeout=10).json()
    names = [app["name"] for app in master["activeapps"] + master["completedapps"]]
    assert f"with-{tmp_path.name}" in names
    assert f"without-{tmp_path.name}" not in names
