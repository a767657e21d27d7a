"""Transactional errors classified by kind: retried, abortable, or fatal (a stub librdkafka).

What the engine does with each kind (abort and rewind, or exit) is tested in
`test_kafka_transactions.py`.
"""

from __future__ import annotations

import pytest

from framebus.kafka import producer as producer_module
from framebus.kafka.producer import TransactionError, TxnErrorKind, txn_error_kind
from tests.unit.framebus.stubproducer import (
    ABORTABLE,
    FENCED,
    TIMED_OUT,
    Watched,
    scripted_producer,
)


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_module, "TXN_RETRY_BACKOFF_S", 0.0)


def test_txn_error_kind_when_flags_then_fatal_first_then_abort_then_retry() -> None:
    assert txn_error_kind(True, True, True) is TxnErrorKind.FATAL
    assert txn_error_kind(False, True, True) is TxnErrorKind.ABORTABLE
    assert txn_error_kind(False, False, True) is TxnErrorKind.RETRIABLE
    assert txn_error_kind(False, False, False) is TxnErrorKind.FATAL


def test_commit_when_retriable_timeout_then_same_call_retried_and_commits() -> None:
    p, client = scripted_producer({"commit_transaction": [TIMED_OUT, TIMED_OUT]})
    p.commit_transaction(1.0)
    assert client.names == ["commit_transaction"] * 3


def test_send_offsets_when_timeouts_exhaust_tries_then_abortable() -> None:
    p, client = scripted_producer({"send_offsets_to_transaction": [TIMED_OUT] * 5})
    with pytest.raises(TransactionError) as caught:
        p.send_offsets_to_transaction({("frames", 0): 5}, object(), 1.0)
    assert caught.value.kind is TxnErrorKind.ABORTABLE  # not the old fatal exit
    assert client.names == ["send_offsets_to_transaction"] * producer_module.TXN_ATTEMPTS


def test_commit_when_abortable_then_requires_abort_and_not_retried() -> None:
    p, client = scripted_producer({"commit_transaction": [ABORTABLE]})
    with pytest.raises(TransactionError) as caught:
        p.commit_transaction(1.0)
    assert caught.value.requires_abort
    assert client.names == ["commit_transaction"]


def test_commit_when_fenced_then_fatal_and_not_retried() -> None:
    p, client = scripted_producer({"commit_transaction": [FENCED]})
    with pytest.raises(TransactionError) as caught:
        p.commit_transaction(1.0)
    assert caught.value.kind is TxnErrorKind.FATAL
    assert client.names == ["commit_transaction"]


def test_abort_when_timeouts_exhaust_tries_then_fatal() -> None:
    p, _client = scripted_producer({"abort_transaction": [TIMED_OUT] * 5})
    with pytest.raises(TransactionError) as caught:
        p.abort_transaction(1.0)
    assert caught.value.kind is TxnErrorKind.FATAL


def test_transactional_calls_when_watched_then_each_try_watched_with_twice_its_timeout() -> None:
    watched = Watched()
    p, _client = scripted_producer({"commit_transaction": [TIMED_OUT]}, watch=watched)
    p.begin_transaction()
    p.commit_transaction(15.0)
    assert watched == [
        ("begin_transaction", producer_module.UNTIMED_CALL_BUDGET_S),
        ("commit_transaction", 30.0),
        ("commit_transaction", 30.0),
    ]


def test_close_when_producer_failed_for_good_then_released_without_raising() -> None:
    # A transactional producer in a fatal state raises from flush(); close() must still release
    # it, or the exception masks the error that made it fatal and the rewind never happens.
    p, client = scripted_producer({"flush": [FENCED, FENCED]})
    p.begin_transaction()  # the client exists
    assert p.close() == 0
    assert [name for name, _a, _kw in client.calls].count("flush") == 1
    assert p.close() == 0  # released: nothing left to flush
