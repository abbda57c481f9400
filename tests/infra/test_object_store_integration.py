"""The stack's S3-compatible object store: a real S3 API on loopback, read and written by delta-rs."""

from __future__ import annotations

import subprocess
import sys
import uuid

import httpx
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.support.stack import Stack, cdcpipe, parse_exports

pytestmark = pytest.mark.integration


def s3_options(stack: Stack, **changes: str) -> dict[str, str]:
    return stack.s3_options(**changes)


def table_url(stack: Stack) -> str:
    bucket = stack.env["CDCPIPE_S3_LAKE"].removeprefix("s3a://").split("/")[0]
    return f"s3://{bucket}/tests/{uuid.uuid4().hex[:10]}"


def test_delta_rs_writes_and_reads_a_table_through_the_s3_api(stack: Stack) -> None:
    url, options = table_url(stack), s3_options(stack)
    write_deltalake(url, pa.table({"id": [1, 2, 3]}), storage_options=options)
    write_deltalake(url, pa.table({"id": [4]}), storage_options=options, mode="append")
    table = DeltaTable(url, storage_options=options)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4]
    # The objects are on the store's disk, where its filesystem backend keeps them: not a local lake.
    key = url.removeprefix("s3://")
    assert (stack.home / "state" / "s3" / key / "_delta_log" / "00000000000000000001.json").is_file()


def test_a_request_signed_with_a_wrong_secret_or_unsigned_is_refused(stack: Stack) -> None:
    url = table_url(stack)
    write_deltalake(url, pa.table({"id": [1]}), storage_options=s3_options(stack))
    endpoint, key = stack.env["AWS_ENDPOINT_URL"], url.removeprefix("s3://")
    bucket = key.split("/")[0]
    # The filesystem backend serves a bucket whose folder others may read without a signature: not ours.
    for anonymous in (f"{endpoint}/{bucket}", f"{endpoint}/{key}/_delta_log/00000000000000000000.json"):
        response = httpx.get(anonymous, timeout=10)
        assert response.status_code == 403, (anonymous, response.status_code)
        assert "AccessDenied" in response.text
    with pytest.raises(OSError, match=r"403|SignatureDoesNotMatch|InvalidAccessKeyId"):
        write_deltalake(
            table_url(stack),
            pa.table({"id": [1]}),
            storage_options=s3_options(stack, AWS_SECRET_ACCESS_KEY="wrong"),  # noqa: S106
        )


def test_a_shell_given_only_the_exports_reaches_the_store(stack: Stack) -> None:
    """What any S3 tool reads from the environment: the exports alone are enough, no option passed."""
    url = table_url(stack)
    write_deltalake(url, pa.table({"id": [7]}), storage_options=s3_options(stack))
    exports = parse_exports(cdcpipe("stack", "env", env=stack.process_env()).stdout)
    assert {k for k in exports if k.startswith("AWS_")} >= set(stack.s3_options())
    assert exports["CDCPIPE_S3_LAKE"].startswith("s3a://")
    read = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from deltalake import DeltaTable; print(DeltaTable({url!r}).to_pyarrow_table().num_rows)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **exports},
        check=False,
    )
    assert read.stdout.strip() == "1", read.stderr
