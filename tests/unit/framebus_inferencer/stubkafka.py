"""librdkafka clients as stubs, for the inferencer's pipeline without a broker.

The real `framebus.kafka` wrappers run on top of them (through their `factory` argument), so what
the wrappers do around a call (watching it, classifying its errors) is what the tests exercise.
A stub call named in `block` never returns until `release` is set, like librdkafka's
transactional calls when the coordinator broker vanished.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from framebus.codec import FrameCodec
from framebus.messages import Frame, TensorLayout


@dataclass
class StubMessage:
    """A consumed record (fits `framebus.kafka.protocol.MessageProto`)."""

    _value: bytes
    _key: bytes
    _topic: str
    _partition: int
    _offset: int

    def value(self) -> bytes:  # noqa: D102
        return self._value

    def key(self) -> bytes:  # noqa: D102
        return self._key

    def topic(self) -> str:  # noqa: D102
        return self._topic

    def partition(self) -> int:  # noqa: D102
        return self._partition

    def offset(self) -> int:  # noqa: D102
        return self._offset

    def headers(self) -> list[tuple[str, bytes]]:  # noqa: D102
        return []

    def error(self) -> None:  # noqa: D102
        return None

    def timestamp(self) -> tuple[int, int]:  # noqa: D102
        return (0, 0)


def frame_messages(topic: str, n: int, size: int, camera: str = "cam") -> list[StubMessage]:
    """`n` frame records of one camera on partition 0, `size`x`size` RGB."""
    codec = FrameCodec()
    out = []
    for seq in range(n):
        frame = Frame(
            camera_id=camera,
            seq=seq,
            capture_ts_us=time.time_ns() // 1000,
            orig_width=size,
            orig_height=size,
            shape=(size, size, 3),
            layout=TensorLayout.HWC,
            scale=1.0,
            pad_x=0,
            pad_y=0,
            tensor=np.zeros((size, size, 3), np.uint8).tobytes(),
        )
        out.append(StubMessage(codec.encode(frame), camera.encode(), topic, 0, seq))
    return out


@dataclass
class Blocking:
    """Which stub calls never return (until `release` is set), and who entered them."""

    block: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    entered: dict[str, float] = field(default_factory=dict)  # call -> monotonic time entered

    def enter(self, name: str) -> None:
        """Called by every stub call: blocks the calls named in `block`."""
        if name in self.block:
            self.entered.setdefault(name, time.monotonic())
            stuck_in_stub_call(self.release)


def stuck_in_stub_call(release: threading.Event) -> None:
    """Where a blocked stub call waits: its name is what the stack dump must show."""
    release.wait()


class StubProducerClient:
    """A transactional confluent_kafka.Producer stand-in that accepts everything."""

    def __init__(self, blocking: Blocking) -> None:
        self.blocking = blocking
        self.produced: list[tuple[str, bytes]] = []
        self.commits = 0

    def produce(self, topic: str, value: bytes, **_kw: Any) -> None:  # noqa: D102
        self.blocking.enter("produce")
        self.produced.append((topic, value))

    def poll(self, _timeout: float = 0) -> int:  # noqa: D102
        return 0

    def flush(self, _timeout: float = 0) -> int:  # noqa: D102
        return 0

    def list_topics(self, **_kw: Any) -> None:  # noqa: D102
        return None

    def init_transactions(self, _timeout: float) -> None:  # noqa: D102
        self.blocking.enter("init_transactions")

    def begin_transaction(self) -> None:  # noqa: D102
        self.blocking.enter("begin_transaction")

    def send_offsets_to_transaction(self, *_args: Any) -> None:  # noqa: D102
        self.blocking.enter("send_offsets_to_transaction")

    def commit_transaction(self, _timeout: float) -> None:  # noqa: D102
        self.blocking.enter("commit_transaction")
        self.commits += 1

    def abort_transaction(self, _timeout: float) -> None:  # noqa: D102
        self.blocking.enter("abort_transaction")

    def purge(self) -> None:  # noqa: D102
        return None

    def __len__(self) -> int:
        return 0


class StubConsumerClient:
    """A confluent_kafka.Consumer stand-in serving `messages` once, on partition 0."""

    def __init__(self, messages: list[StubMessage], blocking: Blocking) -> None:
        self.messages = list(messages)
        self.blocking = blocking
        self.on_assign: Any = None
        self.assigned: list[Any] = []
        self.paused = False
        self.pauses = 0
        self.consumes_while_paused = 0
        self.commits: list[Any] = []

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:  # noqa: D102
        self.on_assign = callbacks.get("on_assign")
        self.topic = topics[0]

    def consume(self, n: int, timeout: float) -> list[StubMessage]:  # noqa: D102
        if self.on_assign is not None:
            part = _Partition(self.topic, 0)
            self.assigned = [part]
            self.on_assign(self, [part])
            self.on_assign = None
        if self.paused:
            self.consumes_while_paused += 1
            time.sleep(min(timeout, 0.01))
            return []
        out, self.messages = self.messages[:n], self.messages[n:]
        if not out:
            time.sleep(min(timeout, 0.01))
        return out

    def pause(self, _partitions: list[Any]) -> None:  # noqa: D102
        self.paused = True
        self.pauses += 1

    def resume(self, _partitions: list[Any]) -> None:  # noqa: D102
        self.paused = False

    def assignment(self) -> list[Any]:  # noqa: D102
        return self.assigned

    def position(self, partitions: list[Any]) -> list[Any]:  # noqa: D102
        return []

    def store_offsets(self, **_kw: Any) -> None:  # noqa: D102
        return None

    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None:  # noqa: D102
        self.commits.append(offsets)

    def consumer_group_metadata(self) -> object:  # noqa: D102
        return object()

    def close(self) -> None:  # noqa: D102
        return None


@dataclass
class _Partition:
    topic: str
    partition: int
    offset: int = -1001
