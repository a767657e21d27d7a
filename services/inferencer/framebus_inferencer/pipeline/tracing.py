"""Tracing of the inferencer pipeline: one process span per batch, linked to each frame's span.

Off (no SDK tracer provider installed), no decode timing is kept and no span links are built,
so the hot path pays nothing for it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from framebus.telemetry.tracing import span_context_of, tracer
from framebus_inferencer.batcher import Batch
from framebus_inferencer.records import Received


class BatchTracing:
    """Builds the batch spans from the decode windows the receive thread records."""

    def __init__(self, topic: str, consumer_group: str) -> None:
        self.topic = topic
        self.consumer_group = consumer_group
        self._tracer = tracer("framebus_inferencer.pipeline")
        self.enabled = not isinstance(
            trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider
        )
        self._decode_ns: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, offset)

    def now_ns(self) -> int:
        """A decode window's start (0 when tracing is off: nothing is recorded then)."""
        return time.time_ns() if self.enabled else 0

    def decoded(self, partition: int, offset: int, start_ns: int) -> None:
        """A frame record was decoded between `start_ns` and now."""
        if self.enabled:
            self._decode_ns[(partition, offset)] = (start_ns, time.time_ns())

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the decode windows of revoked partitions."""
        revoked = set(partitions)
        for key in [k for k in self._decode_ns if k[0] in revoked]:
            del self._decode_ns[key]

    def batch_span(self, batch: Batch[Received]) -> trace.Span:
        """The batch's process span (messaging conventions), linked to every frame's span.

        It starts when the batch's first frame was decoded and ends when its records are
        delivered; a `preprocess` child covers the frames' decoding and decompression.
        """
        items = [*batch.frames, *batch.stale, *batch.still]
        windows = [self._decode_ns.pop((p.partition, p.offset), None) for p in items]
        known = [w for w in windows if w is not None]
        start = min((w[0] for w in known), default=time.time_ns())
        partitions = sorted({p.partition for p in items})
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": self.topic,
            "messaging.consumer.group.name": self.consumer_group,
            "messaging.batch.message_count": len(items),
            "messaging.kafka.offset": min(p.offset for p in items),
            "framebus.batch.close_reason": batch.reason,
            "framebus.batch.stale_count": len(batch.stale),
        }
        if len(partitions) == 1:
            attributes["messaging.destination.partition.id"] = str(partitions[0])
        else:  # a batch can gather frames of several partitions: name them all
            attributes["framebus.partitions"] = [str(p) for p in partitions]
        links = []
        for p in items:
            ctx = span_context_of(p.payload.msg.headers())
            if ctx is not None:
                links.append(
                    Link(ctx, {"framebus.camera_id": p.camera, "framebus.seq": p.payload.frame.seq})
                )
        span = self._tracer.start_span(
            f"process {self.topic}",
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=start,
        )
        if known:
            child = self._tracer.start_span(
                "preprocess",
                context=trace.set_span_in_context(span),
                start_time=start,
                attributes={"framebus.frames": len(known)},
            )
            child.end(end_time=max(w[1] for w in known))
        return span

    def child(self, parent: trace.Span | None, name: str) -> Any:
        """A child span of the batch span (a no-op context when tracing is off)."""
        if parent is None:
            return contextlib.nullcontext()
        return self._tracer.start_as_current_span(name, context=trace.set_span_in_context(parent))
