"""Dead-letter records: the original bytes, where they came from and why they were refused."""

from __future__ import annotations

from framebus.kafka.protocol import MessageProto

REASON = "framebus.dlq.reason"
ERROR_TYPE = "framebus.dlq.error_type"
SOURCE_TOPIC = "framebus.dlq.source_topic"
SOURCE_PARTITION = "framebus.dlq.source_partition"
SOURCE_OFFSET = "framebus.dlq.source_offset"
SERVICE = "framebus.dlq.service"


def dead_letter_headers(
    msg: MessageProto, reason: str, error_type: str, service: str
) -> list[tuple[str, bytes]]:
    """Headers that say where a refused message came from and why; its own headers follow."""
    own = [(k, v) for k, v in (msg.headers() or []) if not k.startswith("framebus.dlq.")]
    return [
        (REASON, reason.encode("utf-8", "replace")),
        (ERROR_TYPE, error_type.encode()),
        (SOURCE_TOPIC, (msg.topic() or "").encode()),
        (SOURCE_PARTITION, str(msg.partition()).encode()),
        (SOURCE_OFFSET, str(msg.offset()).encode()),
        (SERVICE, service.encode()),
        *own,
    ]
