"""A stage stuck in a call that never returns: reported with its stack, unready, and an exit.

The pipeline runs on the real Kafka wrappers over stub librdkafka clients (`stubkafka`) and the
real engine on a small generated model. A stub call that never returns stands in for librdkafka's
`send_offsets_to_transaction` past its timeout after the coordinator broker died.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.health import Health
from framebus.telemetry.watchdog import EXIT_STALLED, Watchdog
from framebus_inferencer.engine import Engine
from framebus_inferencer.pipeline import Pipeline
from framebus_inferencer.service import engine_options
from framebus_inferencer.settings import DeliveryMode, InferencerSettings, Provider
from framebus_inferencer.stats import InferencerStats
from testkit.models import yolov8_model
from tests.unit.framebus_inferencer.stubkafka import (
    Blocking,
    StubConsumerClient,
    StubProducerClient,
    frame_messages,
)

SIZE = 32
STAGE_TIMEOUT_S = 2.0  # transactional calls time out at 1 s; the watchdog allows 2 s
CHECK_EVERY_S = 0.1
GRACE_S = 0.2


@dataclass
class Run:
    """A pipeline running on a thread under a watchdog whose exit is recorded, not taken."""

    health: Health
    blocking: Blocking
    consumer: StubConsumerClient
    exited: list[tuple[int, float]]  # (code, monotonic time)
    dump: Path
    pipeline: Pipeline

    def wait_exit(self, timeout_s: float) -> tuple[int, float]:
        deadline = time.monotonic() + timeout_s
        while not self.exited and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.exited, f"no exit within {timeout_s} s; liveness {self.health.liveness()}"
        return self.exited[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = np.zeros((4 + 1, 3), np.float32)
    rows[:, 0] = [16, 16, 8, 8, 0.9]
    path = tmp_path_factory.mktemp("stall-model") / "box.onnx"
    onnx.save(yolov8_model(rows, input_size=SIZE, names=["thing"]), str(path))
    return path


def settings_for(model: Path, delivery: DeliveryMode) -> InferencerSettings:
    return InferencerSettings(
        model_path=model,
        providers=(Provider.CPU,),
        delivery=delivery,
        max_batch=2,
        max_wait_ms=5,
        stage_timeout_s=STAGE_TIMEOUT_S,
    )


@pytest.fixture
def start(model: Path, tmp_path: Path) -> Iterator[object]:
    runs: list[tuple[Run, threading.Event, threading.Thread, Watchdog]] = []

    def launch(
        block: set[str],
        delivery: DeliveryMode = DeliveryMode.EXACTLY_ONCE,
        frames: int = 6,
        engine_blocks: bool = False,
    ) -> Run:
        settings = settings_for(model, delivery)
        blocking = Blocking(block)
        engine = Engine(model, engine_options(settings))
        if engine_blocks:
            real = engine.infer_slot

            def infer_slot(*args: object) -> object:
                blocking.enter("engine_run")
                return real(*args)  # type: ignore[arg-type]

            engine.infer_slot = infer_slot  # type: ignore[method-assign]
        consumer_client = StubConsumerClient(
            frame_messages(settings.topics.frames_topic, frames, SIZE), blocking
        )
        health = Health()
        exited: list[tuple[int, float]] = []
        dump = tmp_path / "stacks.txt"
        out = dump.open("w")
        watchdog = Watchdog(
            health,
            check_every_s=CHECK_EVERY_S,
            grace_s=GRACE_S,
            exit_process=lambda code: exited.append((code, time.monotonic())),
            stack_out=out,
        ).start()
        kafka = KafkaSettings()
        eos = delivery is DeliveryMode.EXACTLY_ONCE
        producer = Producer(
            kafka,
            {"transactional.id": "t"} if eos else {"enable.idempotence": False},
            factory=lambda _c: StubProducerClient(blocking),
            watch=health.call,
        )
        consumer = Consumer(kafka, "g", factory=lambda _c: consumer_client, watch=health.call)
        pipeline = Pipeline(settings, engine, consumer, producer, InferencerStats(), health=health)
        stop = threading.Event()
        failures: list[Exception] = []

        def run() -> None:
            try:
                pipeline.run(stop)
            except Exception as exc:  # noqa: BLE001 - kept for the test to look at
                failures.append(exc)

        thread = threading.Thread(target=run, name="pipeline", daemon=True)
        thread.start()
        r = Run(health, blocking, consumer_client, exited, dump, pipeline)
        runs.append((r, stop, thread, watchdog))
        return r

    yield launch
    for r, stop, thread, watchdog in runs:
        watchdog.stop()
        r.blocking.release.set()
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("call", ["send_offsets_to_transaction", "commit_transaction"])
def test_pipeline_when_transactional_call_never_returns_then_stack_dumped_unready_and_exit_70(
    start: object, call: str
) -> None:
    run = start({call})  # type: ignore[operator]
    code, at = run.wait_exit(20)
    assert code == EXIT_STALLED
    # Within its budget (twice the call's timeout), plus one look and the grace.
    stuck_for = at - run.blocking.entered[call]
    # The slack is for a loaded machine (CI shares two cores with a broker).
    assert STAGE_TIMEOUT_S < stuck_for < STAGE_TIMEOUT_S + 2 * CHECK_EVERY_S + GRACE_S + 3.0
    alive, body = run.health.liveness()
    assert not alive
    assert any(f"publish stuck in {call}" in c for c in body["stuck_calls"]), body
    ready, why = run.health.readiness()
    assert not ready
    assert call in why["reasons"]["stalled"]
    stacks = run.dump.read_text()
    assert "most recent call first" in stacks
    assert "stuck_in_stub_call" in stacks
    assert f"in {call}" in stacks  # the stub's frame, under the wrapper's


def test_pipeline_when_engine_run_never_returns_then_infer_stage_reported_and_exit_70(
    start: object,
) -> None:
    run = start(set(), engine_blocks=True, delivery=DeliveryMode.AT_LEAST_ONCE)
    run.blocking.block.add("engine_run")
    code, at = run.wait_exit(20)
    assert code == EXIT_STALLED
    assert at - run.blocking.entered["engine_run"] > STAGE_TIMEOUT_S
    _, body = run.health.liveness()
    assert any("infer stuck in engine run" in c for c in body["stuck_calls"]), body
    assert "infer_slot" in run.dump.read_text()


def test_receive_when_pipeline_stays_full_then_fetching_paused_group_polled_and_budget_ends_it(
    start: object,
) -> None:
    # The engine never returns, so the hand-off to it stays full. The receive thread pauses the
    # partitions and keeps calling consume(); past its budget it is reported (the engine run's
    # budget is longer here, so the hand-off is what the watchdog names).
    run = start(set(), engine_blocks=True, delivery=DeliveryMode.AT_LEAST_ONCE, frames=40)
    receiver = run.pipeline.receiver
    receiver.pause_after_s = 0.3
    receiver.full_budget_s = 1.5
    run.pipeline.control.stage_timeout_s = 30.0
    run.blocking.block.add("engine_run")
    code, _ = run.wait_exit(20)
    assert code == EXIT_STALLED
    assert run.consumer.pauses == 1
    assert run.consumer.consumes_while_paused > 10  # the group was served while full
    _, body = run.health.liveness()
    assert any("receive stuck in hand-off to the infer stage" in c for c in body["stuck_calls"])
    assert "stuck_loops_s" not in body  # the receive loop itself kept beating


def test_pipeline_when_nothing_blocks_then_every_frame_published_and_no_exit(
    start: object,
) -> None:
    run = start(set(), frames=6)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and run.pipeline.stats.by_status.get("INFERRED", 0) < 6:
        time.sleep(0.05)
    assert run.pipeline.stats.by_status.get("INFERRED", 0) == 6
    time.sleep(STAGE_TIMEOUT_S + 0.5)  # idle is not a stall
    assert not run.exited
    assert run.health.liveness()[0]


def test_receive_when_partitions_lost_then_dropped_at_once_without_the_revoke_drain(
    model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from framebus_inferencer.batcher import Pending
    from framebus_inferencer.pipeline import receive
    from framebus_inferencer.pipeline.context import StageContext
    from framebus_inferencer.pipeline.control import Control
    from framebus_inferencer.pipeline.handoff import InFlight, StageQueue
    from framebus_inferencer.pipeline.ledger import CommitLedger
    from tests.unit.framebus_inferencer.stubkafka import _Partition

    monkeypatch.setattr(receive, "REVOKE_DRAIN_S", 1.0)
    settings = settings_for(model, DeliveryMode.AT_LEAST_ONCE)
    control = Control(Health())
    in_flight = InFlight()
    in_flight.add()  # a batch the publisher has not delivered (and will not, here)
    consumer = Consumer(KafkaSettings(), "g", factory=lambda _c: StubConsumerClient([], Blocking()))
    receiver = receive.Receiver(
        StageContext(settings, control),
        CommitLedger(8),
        StageQueue(control, maxsize=1),
        in_flight,
        consumer,
        (SIZE, SIZE, 3),
    )

    def hold_frame() -> None:
        receiver.batcher.add(Pending("cam", 0, 0.0, 0, 0, None))  # type: ignore[arg-type]

    hold_frame()
    started = time.monotonic()
    receiver._on_lost(None, [_Partition("frames", 0)])
    assert time.monotonic() - started < 0.2
    assert len(receiver.batcher) == 0
    hold_frame()
    started = time.monotonic()
    receiver._on_revoke(None, [_Partition("frames", 0)])  # waits for the batch in flight
    assert time.monotonic() - started >= 1.0
    assert len(receiver.batcher) == 0
