"""The three-stage inferencer pipeline: receive -> infer -> publish, on three threads.

Receiving and deserialising the next batch overlaps inference of the current one, and publishing
(waiting for the broker's acknowledgements) of the previous one overlaps both, so the engine does
not wait on Kafka while frames are queued. Bounded queues between the stages give backpressure.
What may be committed, and when, is the commit ledger's to decide (`pipeline/ledger.py`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.telemetry.health import Health
from framebus_inferencer.engine import Engine
from framebus_inferencer.pipeline.context import monotonic_ms, stage_context
from framebus_inferencer.pipeline.handoff import InFlight, Publication, StageQueue, Work
from framebus_inferencer.pipeline.infer import Inference
from framebus_inferencer.pipeline.ledger import CommitLedger
from framebus_inferencer.pipeline.publish import Publisher
from framebus_inferencer.pipeline.receive import Receiver
from framebus_inferencer.pipeline.staging import StagingPool
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.state import RunState
from framebus_inferencer.stats import InferencerStats

log = logging.getLogger(__package__)


class Pipeline:
    """Runs the three stages until stopped, idle, or failed."""

    def __init__(
        self,
        settings: InferencerSettings,
        engine: Engine,
        consumer: Consumer,
        producer: Producer,
        stats: InferencerStats,
        clock_ms: Callable[[], float] = monotonic_ms,
        health: Health | None = None,
        state: RunState | None = None,
    ) -> None:
        ctx = stage_context(settings, stats, health, state, clock_ms)
        self.stats, self.state, self.control = ctx.stats, ctx.state, ctx.control
        self.consumer = consumer
        self.ledger = CommitLedger(settings.commit_window, on_error=stats.error)
        to_infer: StageQueue[Work] = StageQueue(self.control, maxsize=1)
        to_publish: StageQueue[Publication] = StageQueue(self.control, maxsize=2)
        in_flight = InFlight()
        staging = StagingPool(engine)
        self.receiver = Receiver(
            ctx,
            self.ledger,
            to_infer,
            in_flight,
            consumer,
            engine.info.frame_shape,
            staging,
            engine.info.input.pixel_format,
        )
        self.inference = Inference(ctx, to_infer, to_publish, engine, staging)
        self.publisher = Publisher(ctx, to_publish, in_flight, self.ledger, producer)

    def run(self, outer_stop: threading.Event) -> None:
        """Run all stages until `outer_stop`, idleness or a failure; raise the first failure."""
        threads = [
            threading.Thread(target=self._guard(self.receiver.run, outer_stop), name="fb-receive"),
            threading.Thread(target=self._guard(self.inference.run), name="fb-infer"),
            threading.Thread(target=self._guard(self.publisher.run), name="fb-publish"),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # The last batches' offsets, now that no thread uses the consumer.
        self.ledger.commit(self.consumer, wait=True)
        failure = self.control.first_failure
        if failure is not None:
            raise failure

    def _guard(self, target: Callable[..., None], *args: Any) -> Callable[[], None]:
        def run() -> None:
            try:
                target(*args)
            except BaseException as exc:  # reported: re-raised by run() on the caller's thread
                log.exception("pipeline stage %s failed", threading.current_thread().name)
                self.stats.error(type(exc).__name__)
                self.control.fail(exc)
            finally:
                self.control.retire()  # an ended stage is not a stuck one

        return run
