"""A real S3-compatible server for the tests: versitygw over a temporary folder, on a free port.

scripts/install-s3-server.sh builds it from its Go module into .cache/bin (`make test` runs it);
`FRAMEBUS_S3_SERVER` names another build. A test that needs it fails, never skips, without it.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import botocore.config
import botocore.exceptions
import pytest

from framebus_tools.process import free_port

if TYPE_CHECKING:  # stubs only (types-boto3[s3], the dev extra)
    from types_boto3_s3.client import S3Client

REPO = Path(__file__).resolve().parents[2]
ACCESS_KEY, SECRET_KEY = "framebus-test", "framebus-test-secret"
START_TIMEOUT_S = 20.0


def find_s3_server() -> Path:
    """`$FRAMEBUS_S3_SERVER`, else the versitygw that scripts/install-s3-server.sh builds."""
    binary = Path(os.environ.get("FRAMEBUS_S3_SERVER") or REPO / ".cache" / "bin" / "versitygw")
    if not binary.exists():
        pytest.fail(
            f"{binary} not found: run scripts/install-s3-server.sh (builds versitygw from its Go "
            "module into .cache/bin; `make test` runs it) or set FRAMEBUS_S3_SERVER"
        )
    return binary


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint and the root user's keys."""

    endpoint_url: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY

    def client(self) -> S3Client:
        """A boto3 client of the server, as the test's own reader."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name="us-east-1",
            config=botocore.config.Config(s3={"addressing_style": "path"}),
        )

    def settings(self, bucket: str, prefix: str) -> dict[str, str]:
        """The clips service's settings (`service_env` keywords) to write to `bucket`."""
        return {
            "clips_target": f"s3://{bucket}/{prefix}",
            "s3_endpoint_url": self.endpoint_url,
            "s3_access_key_id": self.access_key,
            "s3_secret_access_key": self.secret_key,
            "s3_addressing": "path",
        }


@contextmanager
def running_s3_server(data: Path, log: Path) -> Iterator[S3Server]:
    """versitygw's POSIX backend over `data` on a free port; stopped on exit."""
    port = free_port()
    command = [
        str(find_s3_server()), "--access", ACCESS_KEY, "--secret", SECRET_KEY,
        "--port", f"127.0.0.1:{port}", "--quiet", "posix", str(data),
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = S3Server(f"http://127.0.0.1:{port}")
    try:
        _wait_until_answering(server, process, log)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _wait_until_answering(server: S3Server, process: subprocess.Popen[bytes], log: Path) -> None:
    client = server.client()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"versitygw exited {process.returncode}: {log.read_text()}")
        try:
            client.list_buckets()
            return
        except botocore.exceptions.EndpointConnectionError:
            time.sleep(0.1)
    pytest.fail(f"versitygw did not answer within {START_TIMEOUT_S} s: {log.read_text()}")
