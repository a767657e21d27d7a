"""The publish stage, exactly-once, on the real Producer over a stub librdkafka client.

The publisher keeps one transaction open across publications while a frame held back for
fairness sits below delivered offsets, and commits it through the exactly-once engine
(`framebus.kafka.transactions`) once the ledger says its offsets cover every delivery.
"""

from __future__ import annotations

import pytest

from framebus.kafka import producer as producer_module
from framebus.kafka.protocol import TopicPartition
from framebus.kafka.transactions import RewindError
from framebus.telemetry.health import Health
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.control import Control
from framebus_inferencer.pipeline.handoff import InFlight, Publication, StageQueue
from framebus_inferencer.pipeline.ledger import CommitLedger
from framebus_inferencer.pipeline.publish import Publisher
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.records import Outgoing
from framebus_inferencer.settings import DeliveryMode, InferencerSettings
from framebus_inferencer.stats import InferencerStats
from tests.unit.framebus.stubproducer import ABORTABLE, Script, ScriptedClient, scripted_producer

TP: TopicPartition = ("frames", 0)


def publisher(script: Script, publications: list[list[int]]) -> tuple[Publisher, ScriptedClient]:
    """A publisher of one record per offset, in these publications, then the stream's end.

    Offsets 0 to the highest are received first, so an offset not yet published is held back.
    """
    control = Control(Health(), stage_timeout_s=4.0)
    inbox: StageQueue[Publication] = StageQueue(control, maxsize=len(publications) + 1)
    ledger = CommitLedger(8)
    for offset in range(max(max(p) for p in publications) + 1):
        ledger.received(TP, offset)
    in_flight = InFlight()
    for offsets in publications:
        records = [Outgoing("detections", str(o).encode(), "cam", []) for o in offsets]
        inbox.offer(Publication(records, [(TP, o) for o in offsets], group_metadata="gm"))
        in_flight.add()
    inbox.offer(None)
    producer, client = scripted_producer(script)
    settings = InferencerSettings(delivery=DeliveryMode.EXACTLY_ONCE)
    ctx = StageContext(settings, control, InferencerStats(), tracing=BatchTracing("frames", "g"))
    return Publisher(ctx, inbox, in_flight, ledger, producer), client


def sent_marks(client: ScriptedClient) -> list[dict[TopicPartition, int]]:
    return [
        {(tp.topic, tp.partition): tp.offset for tp in args[0]}
        for name, args, _kw in client.calls
        if name == "send_offsets_to_transaction"
    ]


def test_publisher_when_frame_held_back_below_delivered_then_one_transaction_until_it_comes() -> (
    None
):
    pub, client = publisher({}, [[0, 2], [1]])
    pub.run()
    assert client.names == [
        "init_transactions",
        "begin_transaction",
        "produce",
        "produce",
        "produce",
        "send_offsets_to_transaction",
        "commit_transaction",
    ]
    assert sent_marks(client) == [{TP: 3}]


def test_publisher_when_each_publication_is_contiguous_then_one_transaction_each() -> None:
    pub, client = publisher({}, [[0, 1], [2]])
    pub.run()
    assert client.names.count("begin_transaction") == 2
    assert sent_marks(client) == [{TP: 2}, {TP: 3}]


def test_publisher_when_commit_abortable_then_aborted_and_rewind_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(producer_module, "TXN_RETRY_BACKOFF_S", 0.0)
    pub, client = publisher({"commit_transaction": [None, ABORTABLE]}, [[0], [1]])
    with pytest.raises(RewindError) as caught:
        pub.run()
    assert caught.value.committed == 1  # the first publication's transaction
    assert client.names[-3:] == [
        "send_offsets_to_transaction",
        "commit_transaction",
        "abort_transaction",
    ]
    assert not pub.txn.is_open  # type: ignore[union-attr]


def test_publisher_when_stream_ends_with_transaction_open_then_committed_up_to_the_gap() -> None:
    pub, client = publisher({}, [[1]])  # offset 0 never comes: the transaction stays open
    pub.run()
    assert client.names[-3:] == ["produce", "send_offsets_to_transaction", "commit_transaction"]
    assert sent_marks(client) == [{TP: 0}]  # nothing at or above the missing frame
