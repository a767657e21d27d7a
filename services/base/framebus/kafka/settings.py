"""Kafka connection and topic settings shared by every framebus service."""

from __future__ import annotations

import enum
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framebus.settings import Secret, check, setting

# Kafka's default record limit is 1 MiB; a 640x640x3 uint8 frame is 1,228,800 B, and a 1280x1280
# model input is 4.9 MB. Clients, the broker and the frames topic are all raised to these limits.
MAX_RECORD_BYTES = 8 * 1024 * 1024
BROKER_MAX_MESSAGE_BYTES = 10 * 1024 * 1024


class SecurityProtocol(enum.Enum):
    """How clients talk to the brokers."""

    PLAINTEXT = "plaintext"
    SSL = "ssl"
    SASL_PLAINTEXT = "sasl_plaintext"
    SASL_SSL = "sasl_ssl"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the brokers are and how to authenticate to them."""

    bootstrap_servers: str = setting("127.0.0.1:9092", "Kafka bootstrap servers, host:port[,...].")
    security_protocol: SecurityProtocol = setting(
        SecurityProtocol.PLAINTEXT, "Kafka security protocol."
    )
    sasl_mechanism: str = setting("SCRAM-SHA-512", "SASL mechanism when SASL is used.")
    sasl_username: str | None = setting(None, "SASL user name.")
    sasl_password: Secret | None = setting(None, "SASL password (never logged).")
    ssl_ca_location: Path | None = setting(None, "PEM file of the CA that signed the brokers.")
    ssl_certificate_location: Path | None = setting(None, "Client certificate (mutual TLS).")
    ssl_key_location: Path | None = setting(None, "Client private key (mutual TLS).")
    ssl_key_password: Secret | None = setting(None, "Password of the client private key.")
    client_id: str = setting("framebus", "Client id reported to the brokers.")

    def __post_init__(self) -> None:
        check(bool(self.bootstrap_servers.strip()), "bootstrap_servers", "must not be empty")
        if self.security_protocol in (SecurityProtocol.SASL_SSL, SecurityProtocol.SASL_PLAINTEXT):
            check(self.sasl_username is not None, "sasl_username", "is required with SASL")
            check(self.sasl_password is not None, "sasl_password", "is required with SASL")

    def client_config(self) -> dict[str, Any]:
        """The librdkafka properties common to every client of these brokers."""
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "client.id": self.client_id,
            "security.protocol": self.security_protocol.value,
        }
        if self.security_protocol in (SecurityProtocol.SASL_SSL, SecurityProtocol.SASL_PLAINTEXT):
            conf["sasl.mechanism"] = self.sasl_mechanism
            conf["sasl.username"] = self.sasl_username or ""
            conf["sasl.password"] = self.sasl_password.reveal() if self.sasl_password else ""
        optional = {
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
        }
        conf.update({k: str(v) for k, v in optional.items() if v is not None})
        if self.ssl_key_password is not None:
            conf["ssl.key.password"] = self.ssl_key_password.reveal()
        return conf


def instance_transactional_id(explicit: str | None, group: str) -> str:
    """`explicit`, else `<group>-<hostname>`: stable per instance (a pod, a host).

    So a restarted instance fences its previous incarnation and aborts its open transaction.
    """
    return explicit or f"{group}-{socket.gethostname()}"
