"""The product's exception hierarchy: one root, one class per area, messages that say what to do."""

from __future__ import annotations


class FramebusError(Exception):
    """Root of every error framebus raises on purpose."""


class ConfigError(FramebusError):
    """A setting is missing or invalid; the message names the setting (env var and flag)."""


class CodecError(FramebusError):
    """A message could not be encoded or decoded against the wire schemas."""


class UnknownSchemaError(CodecError):
    """A single-object-encoded message names a schema fingerprint this reader does not know."""


class KafkaError(FramebusError):
    """A Kafka operation failed; carries librdkafka's error code name when there is one.

    `retriable` is librdkafka's own flag (`KafkaError.retriable()`): the same call may succeed
    when made again (`framebus.kafka.retry`).
    """

    def __init__(self, message: str, code: str | None = None, retriable: bool = False) -> None:
        super().__init__(message if code is None else f"{message} [{code}]")
        self.code = code
        self.retriable = retriable


class DeliveryError(KafkaError):
    """A produced record was not acknowledged by the broker."""


class LocalKafkaError(FramebusError):
    """The embedded local Kafka could not be fetched, started or stopped."""


class ModelError(FramebusError):
    """The ONNX model is missing, corrupt, or has an input/output layout framebus cannot use."""


class SourceError(FramebusError):
    """A video source could not be opened or read."""


class StateError(FramebusError):
    """A saved state (a changelog record) cannot be restored: another version or damaged."""
