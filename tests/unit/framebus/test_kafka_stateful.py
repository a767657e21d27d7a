"""The stateful loop (tracker, alerts) on the real Kafka wrappers over stub librdkafka clients.

One transaction per consumed batch carries its outputs, dead letters, changelog states and
offsets, through the exactly-once engine; an aborted one is rewound with fresh clients.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from framebus.errors import CodecError
from framebus.kafka import stateful
from framebus.kafka import transactions as transactions_module
from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.protocol import MessageProto
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.stateful import (
    Output,
    Processed,
    StatefulConfig,
    StatefulRunner,
    StatefulStats,
)
from tests.unit.framebus.stubproducer import ABORTABLE, Script, ScriptedClient
from tests.unit.framebus_inferencer.stubkafka import Blocking, StubConsumerClient, StubMessage

CONFIG = StatefulConfig(
    service="counter",
    group="g",
    source_topic="src",
    changelog_topic="changelog",
    deadletter_topic="dead",
    transactional_id="t",
    poll_s=0.01,
    stop_after_idle_s=0.2,
    stage_timeout_s=4.0,
)


class Counter:
    """Counts records per camera and outputs the count; a record b"bad" cannot be decoded."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.forgotten: list[str] = []

    def process(self, msg: MessageProto) -> Processed:
        if msg.value() == b"bad":
            raise CodecError("not a record")
        key = (msg.key() or b"").decode()
        self.counts[key] = self.counts.get(key, 0) + 1
        return Processed(key, [Output("counts", key, str(self.counts[key]).encode())])

    def snapshot(self, key: str) -> Mapping[str, Any]:
        return {"n": self.counts[key]}

    def restore(self, key: str, state: Mapping[str, Any]) -> None:
        self.counts[key] = int(state["n"])

    def forget(self, key: str) -> None:
        self.counts.pop(key, None)
        self.forgotten.append(key)


class EmptyChangelog:
    """A ChangelogReader with nothing committed yet."""

    undecodable = 0

    def __init__(self, *_args: Any) -> None:
        pass

    def read(self, _partitions: Any) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


MESSAGES = [
    StubMessage(b"r", b"a", "src", 0, 0),
    StubMessage(b"bad", b"a", "src", 0, 1),
    StubMessage(b"r", b"b", "src", 0, 2),
    StubMessage(b"r", b"a", "src", 0, 3),
]


def run(
    monkeypatch: pytest.MonkeyPatch, scripts: list[Script]
) -> tuple[list[ScriptedClient], Counter, StatefulStats, list[Sequence[Output]]]:
    """Run the loop until idle; each attempt gets fresh clients (the next script) and the batch."""
    clients: list[ScriptedClient] = []

    def producer_client(_config: Any) -> ScriptedClient:
        clients.append(ScriptedClient(scripts[len(clients)]))
        return clients[-1]

    def consumer_client(_config: Any) -> StubConsumerClient:
        return StubConsumerClient(MESSAGES, Blocking())  # from the committed offsets: the start

    monkeypatch.setattr(transactions_module, "REWIND_BACKOFF_S", 0.0)
    monkeypatch.setattr(stateful, "ChangelogReader", EmptyChangelog)
    monkeypatch.setattr(stateful, "Producer", functools.partial(Producer, factory=producer_client))
    monkeypatch.setattr(stateful, "Consumer", functools.partial(Consumer, factory=consumer_client))
    counter, stats, committed = Counter(), StatefulStats(), []
    runner = StatefulRunner(KafkaSettings(), CONFIG, counter, stats, on_committed=committed.append)
    runner.run(threading.Event())
    return clients, counter, stats, committed


def test_stateful_when_batch_consumed_then_outputs_dead_letter_states_and_offsets_in_one_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (client,), _counter, stats, committed = run(monkeypatch, [{}])
    assert client.names == [
        "init_transactions",
        "begin_transaction",
        *["produce"] * 6,
        "send_offsets_to_transaction",
        "commit_transaction",
    ]
    assert client.produced() == [
        ("counts", "a", None),
        ("dead", b"a", None),
        ("counts", "b", None),
        ("counts", "a", None),
        ("changelog", "a", 0),  # the changelog partition follows the source partition
        ("changelog", "b", 0),
    ]
    (offsets,) = [args[0] for name, args, _kw in client.calls if name.startswith("send_offsets")]
    assert [(tp.topic, tp.partition, tp.offset) for tp in offsets] == [("src", 0, 4)]
    assert (stats.transactions, stats.records, stats.dead_letters, stats.outputs) == (1, 4, 1, 3)
    assert [[o.value for o in outs] for outs in committed] == [[b"1", b"1", b"2"]]


def test_stateful_when_commit_aborted_then_states_forgotten_and_batch_redone_with_fresh_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clients, counter, stats, committed = run(monkeypatch, [{"commit_transaction": [ABORTABLE]}, {}])
    assert clients[0].names[-2:] == ["commit_transaction", "abort_transaction"]
    assert sorted(counter.forgotten) == ["a", "b"]
    assert clients[1].names[-1] == "commit_transaction"
    # The same outputs as a run without the abort, told once: the aborted ones were never seen.
    assert [[o.value for o in outs] for outs in committed] == [[b"1", b"1", b"2"]]
    assert stats.transactions == 1
