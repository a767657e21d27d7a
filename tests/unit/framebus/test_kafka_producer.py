"""Transactional errors by kind: retried, aborted and rewound, or fatal (a stub librdkafka)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import confluent_kafka
import pytest

from framebus.errors import KafkaError
from framebus.kafka import producer as producer_module
from framebus.kafka.producer import (
    Producer,
    RewindError,
    TransactionError,
    TxnErrorKind,
    txn_error_kind,
)
from framebus.kafka.settings import KafkaSettings

TIMED_OUT = confluent_kafka.KafkaError(
    confluent_kafka.KafkaError._TIMED_OUT, "timed out", retriable=True
)
ABORTABLE = confluent_kafka.KafkaError(
    confluent_kafka.KafkaError.INVALID_PRODUCER_EPOCH, "epoch", txn_requires_abort=True
)
FENCED = confluent_kafka.KafkaError(confluent_kafka.KafkaError._FENCED, "fenced", fatal=True)


class Client:
    """Each transactional call raises the next error of its script, then succeeds."""

    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = script
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def call(*_args: Any) -> None:
            self.calls.append(name)
            errors = self.script.get(name, [])
            if errors:
                raise confluent_kafka.KafkaException(errors.pop(0))

        return call


def producer(script: dict[str, list[Any]]) -> tuple[Producer, Client]:
    client = Client(script)
    return Producer(KafkaSettings(), {"transactional.id": "t"}, factory=lambda _c: client), client


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_module, "TXN_RETRY_BACKOFF_S", 0.0)


def test_txn_error_kind_when_flags_then_fatal_first_then_abort_then_retry() -> None:
    assert txn_error_kind(True, True, True) is TxnErrorKind.FATAL
    assert txn_error_kind(False, True, True) is TxnErrorKind.ABORTABLE
    assert txn_error_kind(False, False, True) is TxnErrorKind.RETRIABLE
    assert txn_error_kind(False, False, False) is TxnErrorKind.FATAL


def test_commit_when_retriable_timeout_then_same_call_retried_and_commits() -> None:
    p, client = producer({"commit_transaction": [TIMED_OUT, TIMED_OUT]})
    p.commit_transaction(1.0)
    assert client.calls == ["commit_transaction"] * 3


def test_send_offsets_when_timeouts_exhaust_tries_then_abortable() -> None:
    p, client = producer({"send_offsets_to_transaction": [TIMED_OUT] * 5})
    with pytest.raises(TransactionError) as caught:
        p.send_offsets_to_transaction({("frames", 0): 5}, object(), 1.0)
    assert caught.value.kind is TxnErrorKind.ABORTABLE
    assert client.calls == ["send_offsets_to_transaction"] * producer_module.TXN_ATTEMPTS
    rewind = p.abort_for(caught.value, 1.0)  # aborted, then rewound: not the old fatal exit
    assert isinstance(rewind, RewindError)
    assert client.calls[-1] == "abort_transaction"


def test_commit_when_abortable_then_aborted_and_rewind_returned() -> None:
    p, client = producer({"commit_transaction": [ABORTABLE]})
    with pytest.raises(TransactionError) as caught:
        p.commit_transaction(1.0)
    assert caught.value.requires_abort
    assert isinstance(p.abort_for(caught.value, 1.0), RewindError)
    assert client.calls == ["commit_transaction", "abort_transaction"]


def test_commit_when_fenced_then_fatal_and_never_aborted() -> None:
    p, client = producer({"commit_transaction": [FENCED]})
    with pytest.raises(TransactionError) as caught:
        p.commit_transaction(1.0)
    assert caught.value.kind is TxnErrorKind.FATAL
    with pytest.raises(KafkaError, match="transaction failed"):
        p.abort_for(caught.value, 1.0)
    assert "abort_transaction" not in client.calls


def test_abort_for_when_produce_refused_mid_transaction_then_aborted() -> None:
    p, client = producer({})
    refused = KafkaError("cannot produce to detections: queue full", "QUEUE_FULL")
    assert isinstance(p.abort_for(refused, 1.0), RewindError)
    assert client.calls == ["abort_transaction"]


def test_abort_when_timeouts_exhaust_tries_then_fatal() -> None:
    p, _client = producer({"abort_transaction": [TIMED_OUT] * 5})
    with pytest.raises(TransactionError) as caught:
        p.abort_transaction(1.0)
    assert caught.value.kind is TxnErrorKind.FATAL


def test_transactional_calls_when_watched_then_each_try_watched_with_twice_its_timeout() -> None:
    watched: list[tuple[str, float]] = []

    @contextmanager
    def watch(name: str, budget_s: float) -> Any:
        watched.append((name, budget_s))
        yield

    client = Client({"commit_transaction": [TIMED_OUT]})
    p = Producer(KafkaSettings(), {"transactional.id": "t"}, factory=lambda _c: client, watch=watch)
    p.begin_transaction()
    p.commit_transaction(15.0)
    assert watched == [
        ("begin_transaction", producer_module.UNTIMED_CALL_BUDGET_S),
        ("commit_transaction", 30.0),
        ("commit_transaction", 30.0),
    ]
