"""Stage 2, the infer thread: warm the engine up, infer, build the records.

Every frame of a batch leaves this stage as exactly one detections record: INFERRED,
DROPPED_STALE (the batcher found it too old when the batch closed), FAILED (the engine raised)
or STILL (the decoder's motion gate saw nothing move; no model run). A batch's records go out in
offset order per partition, so a camera's records keep their seq order for the tracker.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from framebus.codec import DetectionsCodec
from framebus.errors import ModelError
from framebus.messages import FrameStatus
from framebus_inferencer.batcher import Batch, Pending
from framebus_inferencer.engine import Engine
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.handoff import Publication, StageQueue, Work, offsets_of
from framebus_inferencer.pipeline.staging import StagingPool
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.ranby import time_shares
from framebus_inferencer.records import Outgoing, Received, boxes_of, detections
from framebus_inferencer.slot import InputSlot

log = logging.getLogger(__package__)

WARM_UP_ALLOWANCE_S = 900.0  # building TensorRT engines can take many minutes

Answer = tuple[tuple[int, int], Outgoing]  # a frame's (partition, offset) and its record


class Inference:
    """Turns each closed batch into the records the publisher must deliver."""

    def __init__(
        self,
        ctx: StageContext,
        inbox: StageQueue[Work],
        out: StageQueue[Publication],
        engine: Engine,
        staging: StagingPool | None = None,
    ) -> None:
        settings = self.s = ctx.settings
        self.control, self.stats, self.state = ctx.control, ctx.stats, ctx.state
        self.tracing, self.clock_ms = ctx.tracing, ctx.clock_ms
        self.inbox, self.out, self.engine, self.staging = inbox, out, engine, staging
        self.decoder = Decoder(
            engine.info.head,
            settings.confidence_threshold,
            settings.iou_threshold,
            settings.max_detections,
            engine.info.candidates,
        )
        self.model = (engine.info.name, engine.info.version)
        self.codec = DetectionsCodec()

    def run(self) -> None:
        """Warm up, then process batches until the receiver ends the queue."""
        ctl = self.control
        limit = self.engine.memory_limit
        self.stats.engine_loaded(
            self.engine.provider, limit.limit_bytes, limit.enforced_by.value, limit.excludes
        )
        ctl.health.heartbeat("infer", WARM_UP_ALLOWANCE_S)
        try:
            self.engine.warm_up()  # also refuses a head its outputs cannot be decoded as
        except ModelError as exc:  # a start-up refusal: the service's one-line error, no traceback
            self.stats.error(type(exc).__name__)
            ctl.fail(exc)
            return
        if self.staging is not None:
            held = self.staging.warm_up()
            log.info("input slots ready", extra={"bytes": held})
        # Which provider ran the graph is known once it ran (the warm-up's profiled first run).
        self.stats.engine_ran(self.engine.graph_provider, time_shares(self.engine.provider_times))
        self.state.warmed_up.set()
        ctl.warmed.set()
        while True:
            work = self.inbox.get()
            if work is None:
                self.out.put(None)
                ctl.retire()
                return
            self.out.put(self.process(work))

    def process(self, work: Work) -> Publication:
        """The records and offsets of one unit of work."""
        records = list(work.rejects)
        offsets = list(work.reject_offsets)
        batch = work.batch
        try:
            if batch is not None:
                answered = self._stale_records(batch) + self._still_records(batch)
                answered += self._inferred_records(batch, work.span, work.staged)
                records += [rec for _, rec in sorted(answered, key=lambda a: a[0])]
                offsets += offsets_of([*batch.frames, *batch.stale, *batch.still])
        finally:
            if work.staged is not None and self.staging is not None:
                self.staging.give_back(work.staged)  # its outputs are decoded by now
        return Publication(records, offsets, work.span, work.group_metadata)

    def _stale_records(self, batch: Batch[Received]) -> list[Answer]:
        out = []
        for p in batch.stale:
            reason = f"older than max_frame_age_ms={self.s.max_frame_age_ms:g}"
            det = detections(p.payload, FrameStatus.DROPPED_STALE, self.model, reason=reason)
            self.stats.outcome(p.camera, FrameStatus.DROPPED_STALE, det.e2e_latency_ms)
            out.append(self._record(p, det))
        return out

    def _still_records(self, batch: Batch[Received]) -> list[Answer]:
        out = []
        for p in batch.still:
            det = detections(p.payload, FrameStatus.STILL, self.model)
            self.stats.outcome(p.camera, FrameStatus.STILL, det.e2e_latency_ms)
            out.append(self._record(p, det))
        return out

    def _inferred_records(
        self, batch: Batch[Received], span: trace.Span | None, slot: InputSlot | None
    ) -> list[Answer]:
        if not batch.frames:
            return []
        started = self.clock_ms()
        try:
            with self.tracing.child(span, "inference"), self.control.call("engine run"):
                if slot is not None:
                    outputs = self.engine.infer_slot(slot, len(batch.frames))
                else:
                    outputs = self.engine.infer(
                        [p.payload.tensor for p in batch.frames],
                        [p.payload.frame for p in batch.frames],
                    )
            with self.tracing.child(span, "postprocess"):
                raw = self.decoder.decode(outputs, len(batch.frames))
        except ModelError as exc:
            log.error("batch of %d frames failed: %s", len(batch.frames), exc)
            self.stats.error(type(exc).__name__)
            if span is not None:
                span.set_status(Status(StatusCode.ERROR, str(exc)))
            return self._failed_records(batch, str(exc))
        inference_ms = self.clock_ms() - started
        waits = [started - p.received_ms for p in batch.frames]
        self.stats.batch(len(batch.frames), batch.reason, inference_ms, waits)
        self.stats.candidates_saturated(sum(det.saturated for det in raw))
        out = []
        names = self.engine.info.class_names
        for p, det, wait in zip(batch.frames, raw, waits, strict=True):
            boxes = boxes_of(det, p.payload.frame, names)
            rec = detections(
                p.payload,
                FrameStatus.INFERRED,
                self.model,
                boxes,
                None,
                wait,
                inference_ms,
                len(batch.frames),
            )
            self.stats.outcome(p.camera, FrameStatus.INFERRED, rec.e2e_latency_ms)
            out.append(self._record(p, rec))
        return out

    def _failed_records(self, batch: Batch[Received], reason: str) -> list[Answer]:
        out = []
        for p in batch.frames:
            det = detections(p.payload, FrameStatus.FAILED, self.model, reason=reason)
            self.stats.outcome(p.camera, FrameStatus.FAILED, det.e2e_latency_ms)
            out.append(self._record(p, det))
        return out

    def _record(self, p: Pending[Received], det: Any) -> Answer:
        msg = p.payload.msg
        out = Outgoing(
            self.s.topics.detections_topic,
            self.codec.encode(det),
            p.camera,
            list(msg.headers() or []),
        )
        return (p.partition, p.offset), out
