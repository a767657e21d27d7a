"""A local Kafka with a TLS + SASL/SCRAM-SHA-512 listener, for the security tests.

`openssl` makes a throw-away CA and a broker certificate for 127.0.0.1/localhost, packed as a
PKCS#12 keystore; the SCRAM user is created when the KRaft storage is formatted. The broker keeps
its PLAINTEXT listener (inter-broker and controller traffic, and test set-up); clients under test
use only the SASL_SSL one.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from framebus.kafka.settings import KafkaSettings, SecurityProtocol
from framebus.settings import Secret
from framebus_tools.localkafka import LocalKafka


@dataclass(frozen=True)
class SecureBroker:
    """The broker, where its CA is, and the credentials of its one SCRAM user."""

    broker: LocalKafka
    sasl_port: int
    ca_file: Path
    username: str
    password: str

    @property
    def sasl_bootstrap(self) -> str:
        """Bootstrap address of the SASL_SSL listener."""
        return f"127.0.0.1:{self.sasl_port}"

    def client_settings(self, password: str | None = None) -> KafkaSettings:
        """Client settings for the SASL_SSL listener (optionally with another password)."""
        return KafkaSettings(
            bootstrap_servers=self.sasl_bootstrap,
            security_protocol=SecurityProtocol.SASL_SSL,
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=self.username,
            sasl_password=Secret(self.password if password is None else password),
            ssl_ca_location=self.ca_file,
        )


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory: Path, store_password: str) -> tuple[Path, Path]:
    """A CA (PEM) and a PKCS#12 keystore holding the broker's key and CA-signed certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=framebus-test-ca", "-keyout", "ca.key", "-out", "ca.pem",
        cwd=directory,
    )  # fmt: skip
    (directory / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n", encoding="utf-8"
    )
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", "broker.key", "-out", "broker.csr",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "broker.pem",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key",
        "-certfile", "ca.pem", "-name", "broker", "-out", "broker.p12",
        "-passout", f"pass:{store_password}",
        cwd=directory,
    )  # fmt: skip
    return directory / "ca.pem", directory / "broker.p12"


def secure_broker(
    port: int, sasl_port: int, tls_dir: Path, username: str = "alice"
) -> SecureBroker:
    """Configure (not start) a LocalKafka on `port` with a SASL_SSL listener on `sasl_port`."""
    store_password = secrets.token_hex(12)
    password = "s3cr3t-" + secrets.token_hex(10)  # distinctive, so a leak is easy to find
    ca, keystore = make_certificates(tls_dir, store_password)
    prefix = "listener.name.sasl_ssl"
    broker = LocalKafka(
        port=port,
        heap="512m",
        listeners=(f"SASL_SSL://127.0.0.1:{sasl_port}",),
        listener_protocols=("SASL_SSL:SASL_SSL",),
        extra_properties=(
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
            (
                f"{prefix}.scram-sha-512.sasl.jaas.config",
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            ),
            ("ssl.keystore.type", "PKCS12"),
            ("ssl.keystore.location", str(keystore)),
            ("ssl.keystore.password", store_password),
            ("ssl.key.password", store_password),
            ("ssl.client.auth", "none"),
        ),
        scram_users=(f"SCRAM-SHA-512=[name={username},password={password}]",),
    )
    return SecureBroker(broker, sasl_port, ca, username, password)
