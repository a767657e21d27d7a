"""The exactly-once engine on a stub librdkafka: begin, send, offsets, commit, abort and rewind."""

from __future__ import annotations

import threading
import time
from typing import Any

import confluent_kafka
import pytest

from framebus.errors import KafkaError
from framebus.kafka import producer as producer_module
from framebus.kafka import transactions as transactions_module
from framebus.kafka.transactions import (
    FENCE_WINDOW_S,
    MAX_REWINDS,
    RewindError,
    Transactions,
    rewind_backoff_s,
    rewinding,
)
from tests.unit.framebus.stubproducer import (
    ABORTABLE,
    FENCED,
    TIMED_OUT,
    Script,
    ScriptedClient,
    Watched,
    scripted_producer,
)

STAGE_TIMEOUT_S = 4.0  # each call times out at 2 s
INVALID_TXN_STATE = confluent_kafka.KafkaError(
    confluent_kafka.KafkaError.INVALID_TXN_STATE, "failed to end transaction", fatal=True
)
NOT_AUTHORIZED = confluent_kafka.KafkaError(
    confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "denied", fatal=True
)
REFUSED = confluent_kafka.KafkaError(confluent_kafka.KafkaError._STATE, "transaction aborting")


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_module, "TXN_RETRY_BACKOFF_S", 0.0)
    monkeypatch.setattr(transactions_module, "REWIND_BACKOFF_S", 0.0)


def engine(script: Script | None = None, **kwargs: Any) -> tuple[Transactions, ScriptedClient]:
    producer, client = scripted_producer(script, **kwargs)
    return Transactions(producer, STAGE_TIMEOUT_S), client


def test_send_when_no_transaction_open_then_one_begun_for_every_record_until_commit() -> None:
    txn, client = engine()
    txn.send("detections", b"a", "cam")
    txn.send("changelog", b"s", "cam", partition=3)
    assert txn.is_open
    txn.commit({("frames", 0): 8}, "group")
    txn.send("detections", b"b", "cam")
    assert client.names == [
        "begin_transaction",
        "produce",
        "produce",
        "send_offsets_to_transaction",
        "commit_transaction",
        "begin_transaction",
        "produce",
    ]
    assert client.produced() == [
        ("detections", "cam", None),
        ("changelog", "cam", 3),
        ("detections", "cam", None),
    ]
    assert txn.committed == 1


def test_commit_when_marks_then_offsets_sent_with_group_metadata_and_call_timeout() -> None:
    txn, client = engine()
    txn.send("detections", b"a")
    metadata = object()
    txn.commit({("frames", 0): 8, ("frames", 1): 3}, metadata)
    (args,) = [a for name, a, _kw in client.calls if name == "send_offsets_to_transaction"]
    tps, sent_metadata, timeout_s = args
    assert {(tp.topic, tp.partition, tp.offset) for tp in tps} == {
        ("frames", 0, 8),
        ("frames", 1, 3),
    }
    assert sent_metadata is metadata
    assert timeout_s == STAGE_TIMEOUT_S / 2
    assert not txn.is_open


def test_commit_when_nothing_sent_but_marks_then_offsets_alone_committed() -> None:
    txn, client = engine()
    txn.commit({("frames", 0): 8}, "group")
    assert client.names == [
        "begin_transaction",
        "send_offsets_to_transaction",
        "commit_transaction",
    ]
    assert txn.committed == 1


def test_commit_when_open_without_marks_then_records_committed_without_offsets() -> None:
    txn, client = engine()
    txn.send("detections", b"a")
    txn.commit({}, "group")
    assert client.names == ["begin_transaction", "produce", "commit_transaction"]


def test_commit_when_nothing_sent_and_no_marks_then_no_call() -> None:
    txn, client = engine()
    txn.commit({}, "group")
    assert client.names == []
    assert txn.committed == 0


def test_commit_when_abortable_then_aborted_and_rewind_raised_with_commits_so_far() -> None:
    txn, client = engine({"commit_transaction": [None, ABORTABLE]})
    txn.send("detections", b"a")
    txn.commit({("frames", 0): 1}, "group")
    txn.send("detections", b"b")
    with pytest.raises(RewindError) as caught:
        txn.commit({("frames", 0): 2}, "group")
    assert caught.value.committed == 1
    assert client.names[-2:] == ["commit_transaction", "abort_transaction"]
    assert not txn.is_open
    txn.send("detections", b"c")  # a fresh transaction, should the caller go on
    assert client.names[-2:] == ["begin_transaction", "produce"]


def test_commit_when_send_offsets_times_out_every_try_then_aborted_and_rewound() -> None:
    txn, client = engine({"send_offsets_to_transaction": [TIMED_OUT] * 5})
    txn.send("detections", b"a")
    with pytest.raises(RewindError):
        txn.commit({("frames", 0): 1}, "group")
    attempts = producer_module.TXN_ATTEMPTS
    assert client.names[-attempts - 1 :] == ["send_offsets_to_transaction"] * attempts + [
        "abort_transaction"
    ]
    assert "commit_transaction" not in client.names


def test_commit_when_fenced_then_rewound_as_a_fence_and_never_aborted() -> None:
    txn, client = engine({"commit_transaction": [FENCED]})
    txn.send("detections", b"a")
    with pytest.raises(RewindError) as caught:
        txn.commit({("frames", 0): 1}, "group")
    assert caught.value.fenced
    assert "abort_transaction" not in client.names


def test_commit_when_refused_then_fatal_kafka_error_and_never_aborted() -> None:
    txn, client = engine({"commit_transaction": [NOT_AUTHORIZED]})
    txn.send("detections", b"a")
    with pytest.raises(KafkaError, match="transaction failed") as caught:
        txn.commit({("frames", 0): 1}, "group")
    assert not isinstance(caught.value, RewindError)
    assert "abort_transaction" not in client.names


def test_send_when_produce_refused_mid_transaction_then_aborted_and_rewound() -> None:
    txn, client = engine({"produce": [None, REFUSED]})
    txn.send("detections", b"a")
    with pytest.raises(RewindError, match="cannot produce to detections"):
        txn.send("detections", b"b")
    assert client.names[-1] == "abort_transaction"
    assert not txn.is_open


def test_send_when_local_queue_stays_full_then_aborted_and_rewound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactions_module, "QUEUE_ROOM_S", 0.0)
    txn, client = engine({"produce": [BufferError()]})
    with pytest.raises(RewindError, match="QUEUE_FULL"):
        txn.send("detections", b"a")
    assert client.names == ["begin_transaction", "produce", "abort_transaction"]


def test_send_when_begin_fails_for_good_then_fatal_and_never_aborted() -> None:
    txn, client = engine({"begin_transaction": [TIMED_OUT] * 5})
    with pytest.raises(KafkaError, match="transaction failed"):
        txn.send("detections", b"a")
    assert "abort_transaction" not in client.names
    assert "produce" not in client.names


def test_abort_when_abort_itself_fails_for_good_then_rewound_by_a_fresh_producer() -> None:
    txn, _client = engine({"commit_transaction": [ABORTABLE], "abort_transaction": [TIMED_OUT] * 5})
    txn.send("detections", b"a")
    with pytest.raises(RewindError, match="a fresh one takes over"):
        txn.commit({("frames", 0): 1}, "group")


def test_abort_when_abort_fenced_then_rewound_as_a_fence() -> None:
    # The coordinator bumped the epoch when it aborted the timed-out transaction (chaos soak).
    txn, _client = engine({"commit_transaction": [ABORTABLE], "abort_transaction": [FENCED]})
    txn.send("detections", b"a")
    with pytest.raises(RewindError) as caught:
        txn.commit({("frames", 0): 1}, "group")
    assert caught.value.fenced


def test_commit_when_fatal_but_not_fenced_then_rewound_and_never_aborted() -> None:
    # What librdkafka gave once the coordinator's broker died mid-commit (the chaos soak).
    txn, client = engine({"commit_transaction": [INVALID_TXN_STATE]})
    txn.send("detections", b"a")
    with pytest.raises(RewindError, match="INVALID_TXN_STATE"):
        txn.commit({("frames", 0): 1}, "group")
    assert "abort_transaction" not in client.names


def test_init_when_called_then_transactional_id_registered_with_call_timeout() -> None:
    txn, client = engine()
    txn.init()
    assert client.calls == [("init_transactions", (STAGE_TIMEOUT_S / 2,), {})]


def test_engine_when_watched_then_each_call_budget_is_the_stall_timeout() -> None:
    watched = Watched()
    txn, _client = engine(watch=watched)
    txn.send("detections", b"a")
    txn.commit({("frames", 0): 1}, "group")
    assert watched[1:] == [
        ("send_offsets_to_transaction", STAGE_TIMEOUT_S),
        ("commit_transaction", STAGE_TIMEOUT_S),
    ]


# ---- the rewind loop ---------------------------------------------------------------------------


class Attempts:
    """An attempt that raises the next outcome of its list (None: returns)."""

    def __init__(self, outcomes: list[BaseException | None]) -> None:
        self.outcomes = outcomes
        self.runs = 0

    def __call__(self) -> None:
        self.runs += 1
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome


def test_rewinding_when_attempt_aborts_then_run_again_until_it_returns() -> None:
    attempts = Attempts([RewindError("aborted"), RewindError("aborted"), None])
    told: list[RewindError] = []
    rewinding(attempts, threading.Event(), on_rewind=told.append)
    assert attempts.runs == 3
    assert len(told) == 2


def test_rewinding_when_more_aborts_in_a_row_than_allowed_then_rewind_error_raised() -> None:
    attempts = Attempts([RewindError("aborted")] * (MAX_REWINDS + 1) + [None])
    told: list[RewindError] = []
    with pytest.raises(RewindError):
        rewinding(attempts, threading.Event(), on_rewind=told.append)
    assert attempts.runs == MAX_REWINDS + 1
    assert len(told) == MAX_REWINDS + 1  # the last abort is told too (state to drop)


def test_rewinding_when_attempts_commit_before_aborting_then_count_starts_again() -> None:
    progress = [RewindError("aborted", committed=3)] * (2 * MAX_REWINDS)
    attempts = Attempts([*progress, RewindError("aborted"), None])
    rewinding(attempts, threading.Event())
    assert attempts.runs == 2 * MAX_REWINDS + 2


def test_rewinding_when_fatal_then_raised_at_once_without_rewind() -> None:
    attempts = Attempts([KafkaError("transaction failed: fenced", "_FENCED"), None])
    told: list[RewindError] = []
    with pytest.raises(KafkaError, match="fenced"):
        rewinding(attempts, threading.Event(), on_rewind=told.append)
    assert attempts.runs == 1
    assert told == []


def test_rewinding_when_stopped_during_backoff_then_returns_without_another_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactions_module, "REWIND_BACKOFF_S", 10.0)
    stop = threading.Event()
    attempts = Attempts([RewindError("aborted"), None])
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    rewinding(attempts, stop)
    assert time.monotonic() - started < 5.0
    assert attempts.runs == 1


def test_rewind_backoff_s_when_aborts_in_a_row_then_doubles_up_to_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transactions_module, "REWIND_BACKOFF_S", 0.1)
    assert [rewind_backoff_s(n) for n in (1, 2, 3)] == pytest.approx([0.2, 0.4, 0.8])
    assert rewind_backoff_s(20) == transactions_module.MAX_REWIND_BACKOFF_S


def test_rewinding_when_fenced_twice_within_the_window_then_service_ends() -> None:
    now = [0.0]
    fence = RewindError("fenced", "_FENCED", committed=3, fenced=True)
    attempts = Attempts([fence, RewindError("again", "_FENCED", committed=2, fenced=True)])
    with pytest.raises(KafkaError, match="another live instance") as caught:
        rewinding(attempts, threading.Event(), clock=lambda: now[0])
    assert not isinstance(caught.value, RewindError)
    assert attempts.runs == 2


def test_rewinding_when_fences_far_apart_then_each_rewound() -> None:
    times = iter([0.0, FENCE_WINDOW_S + 1])
    fences = [RewindError("fenced", "_FENCED", committed=1, fenced=True) for _ in range(2)]
    attempts = Attempts([*fences, None])
    rewinding(attempts, threading.Event(), clock=lambda: next(times))
    assert attempts.runs == 3
