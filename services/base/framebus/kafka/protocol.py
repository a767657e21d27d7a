"""What framebus reads from Kafka, as plain types: code that uses them imports no confluent_kafka.

Pure logic (the inferencer's commit ledger, the alerts engine) depends on these, so unit tests
drive it with stubs; the wrappers in `consumer.py` and `producer.py` translate librdkafka's
objects into them.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

TopicPartition = tuple[str, int]
# Per partition, the offset to commit: Kafka's "next offset to read", one past the last done.
Marks = dict[TopicPartition, int]

# Watches a library call that may block: `with watch(name, budget_s): call()`. The services pass
# `Health.call`, whose watchdog ends a process stuck in one call past its budget.
CallWatch = Callable[[str, float], AbstractContextManager[None]]


def unwatched(_name: str, _budget_s: float) -> AbstractContextManager[None]:
    """The default CallWatch: watches nothing."""
    return nullcontext()


class MessageProto(Protocol):
    """What framebus reads from a consumed message (confluent_kafka.Message fits it)."""

    def value(self) -> bytes | None: ...  # noqa: D102
    def key(self) -> bytes | None: ...  # noqa: D102
    def topic(self) -> str | None: ...  # noqa: D102
    def partition(self) -> int | None: ...  # noqa: D102
    def offset(self) -> int | None: ...  # noqa: D102
    def headers(self) -> list[tuple[str, bytes]] | None: ...  # noqa: D102
    def error(self) -> Any: ...  # noqa: D102
    def timestamp(self) -> tuple[int, int]: ...  # noqa: D102


@dataclass(frozen=True)
class CommitResult:
    """What a finished offset commit reports: the offsets it committed, or why it failed."""

    committed: Marks
    error: str | None = None


class OffsetCommitter(Protocol):
    """The consumer's side of an offset commit (`framebus.kafka.consumer.Consumer` fits it)."""

    def commit(self, marks: Marks, asynchronous: bool) -> None:
        """Store and commit `marks`; an asynchronous commit reports to the commit listener."""
        ...
