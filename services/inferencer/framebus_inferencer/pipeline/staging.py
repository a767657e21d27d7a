"""Bound input buffers cycled between the receive and infer threads.

When a batch closes, the receive thread writes its frames straight into a free bucket-sized
input slot of the engine (the IO-bound input itself on the CPU), so the infer thread only runs
the model. Three slots per bucket cover the pipeline's depth: one being filled, one queued, one
being inferred. With none free (or a static-batch model) the infer thread copies, as before.

Every slot is made at start-up (`warm_up`, after the engine's own warm-up has run each bucket), so
the pool's memory is taken and its pages written before the first frame. Made mid-stream, a large
bucket's slot (its input, the model's first output and the reused outputs) is fresh pages for the
kernel to zero while frames wait. The memory is what the pool reached anyway once every bucket
had been used.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from framebus.messages import Frame
from framebus_inferencer.engine import Engine
from framebus_inferencer.providers import bucket_for
from framebus_inferencer.slot import InputSlot

SLOTS_PER_BUCKET = 3


class StagingPool:
    """Input slots per bucket, made on first need, reused for the life of the pipeline."""

    def __init__(self, engine: Engine, per_bucket: int = SLOTS_PER_BUCKET) -> None:
        self.engine = engine
        self.per_bucket = per_bucket
        self._free: dict[int, list[InputSlot]] = {}
        self._made: dict[int, int] = {}
        self._lock = threading.Lock()

    def warm_up(self) -> int:
        """Make every bucket's slots now, inputs and outputs written once; return bytes held."""
        if self.engine.info.static_batch is not None:
            return 0  # such a model runs as a loop of static-batch calls: no slots
        made = []
        for bucket in self.engine.buckets:
            for _ in range(self.per_bucket - self._made.get(bucket, 0)):
                made.append(self.engine.input_slot(bucket))
        with self._lock:
            for slot in made:
                self._made[slot.bucket] = self._made.get(slot.bucket, 0) + 1
                self._free.setdefault(slot.bucket, []).append(slot)
            slots = [s for free in self._free.values() for s in free]
        return sum(s.nbytes for s in slots)

    def stage(
        self,
        frames: Sequence[npt.NDArray[np.uint8] | bytes],
        records: Sequence[Frame] | None = None,
    ) -> InputSlot | None:
        """A slot holding `frames` of `records` (padding rows zeroed), or None when none is free."""
        slot = self._take(len(frames))
        if slot is not None:
            slot.fill(frames, records)
        return slot

    def give_back(self, slot: InputSlot) -> None:
        """The infer thread is done with `slot` (its outputs are read)."""
        with self._lock:
            self._free.setdefault(slot.bucket, []).append(slot)

    def _take(self, n: int) -> InputSlot | None:
        if self.engine.info.static_batch is not None:
            return None  # such a model runs as a loop of static-batch calls (Engine.infer)
        bucket = bucket_for(n, self.engine.buckets)
        with self._lock:
            free = self._free.get(bucket)
            if free:
                return free.pop()
            if self._made.get(bucket, 0) >= self.per_bucket:
                return None
            self._made[bucket] = self._made.get(bucket, 0) + 1
        return self.engine.input_slot(n)
