"""ONNX Runtime engine: provider chain, uint8 graph surgery, per-bucket IO binding, warm-up.

Only uint8 frames cross to the device, split into planes as they are written into the bound input
(graph.py says why); input and output buffers are allocated once per batch
bucket (powers of two up to `max_batch`) and per worker thread, and reused for every batch.

A model exported with a static batch B (Ultralytics' default without `dynamic=True` is B = 1) has
one bucket, B: a batch of n frames runs as ceil(n / B) calls of B frames (the last one padded),
gathered into batch-shaped outputs. Rewriting the batch dimension instead is not safe: exports
bake it into Reshape constants, so a rewritten model would fail or mix images mid-stream.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import google.protobuf.message  # type: ignore[import-untyped]
import numpy as np
import numpy.typing as npt
import onnx

from framebus.errors import ModelError
from framebus.messages import Frame
from framebus_inferencer.enginecpu import EngineCpu
from framebus_inferencer.fallback import ProviderMismatch
from framebus_inferencer.headshape import resolve_head
from framebus_inferencer.model import ModelInfo, static_batch_note
from framebus_inferencer.orterrors import ORT_ERRORS, is_memory_failure
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.providers import (
    GPU_PROVIDERS,
    EngineOptions,
    LimitedBy,
    MemoryLimit,
    batch_buckets,
    bucket_for,
)
from framebus_inferencer.ranby import graph_provider, idle_note, provider_times, time_shares
from framebus_inferencer.selection import CandidateTail
from framebus_inferencer.session import open_session, take_profile
from framebus_inferencer.settings import HeadFormat
from framebus_inferencer.slot import InputSlot, OutputLayout

log = logging.getLogger(__name__)

_LOAD_ERRORS: tuple[type[BaseException], ...] = (
    *ORT_ERRORS,
    onnx.onnx_cpp2py_export.checker.ValidationError,
    onnx.onnx_cpp2py_export.shape_inference.InferenceError,
    # A file that is not an ONNX protobuf at all fails in onnx.load before ORT sees it.
    google.protobuf.message.DecodeError,
    OSError,
)
WARM_UP_RUNS = 3
CPU_KNOB = "FRAMEBUS_CPU_ARENA_LIMIT_BYTES"
GPU_KNOB = "FRAMEBUS_GPU_MEM_LIMIT_BYTES"


class EngineMemoryError(ModelError):
    """A batch does not fit in the configured memory arena."""


class InferenceError(ModelError):
    """ONNX Runtime failed to run a batch."""


class Engine:
    """Runs batches of uint8 (H, W, 3) frames through the model with IO binding."""

    def __init__(
        self,
        model_path: Path,
        options: EngineOptions | None = None,
        labels_path: Path | None = None,
        head: HeadFormat = HeadFormat.AUTO,
    ) -> None:
        self.options = options or EngineOptions()
        if not model_path.is_file():
            raise ModelError(
                f"model file not found: {model_path} (set FRAMEBUS_MODEL_PATH / --model-path)"
            )
        # CPU spent in run calls, ONNX Runtime's own threads included (those the session makes).
        self.cpu = EngineCpu()
        try:
            raw = model_path.read_bytes()
            model = onnx.load_from_string(raw)
        except _LOAD_ERRORS as exc:
            raise ModelError(f"cannot load ONNX model {model_path}: {exc}") from exc
        head, names = resolve_head(model, labels_path, head, self.options.image_size)
        tail = CandidateTail(self.options, head)
        try:
            with self.cpu.session_threads():
                opened = open_session(model, self.options, tail)
        except _LOAD_ERRORS as exc:
            raise ModelError(f"cannot load ONNX model {model_path}: {exc}") from exc
        # True when the graph was to select a raw head's candidates and cannot (logged as why).
        self.candidate_fallback = tail.say_where(log)
        rows = tail.selection.rows if tail.selection is not None else None
        self.session = opened.session
        # The session profiles its first run only (session.py): kernel time per provider.
        self._profiling = True
        self._profile_lock = threading.Lock()
        self.provider_times: dict[str, float] = {}
        spec = opened.spec
        # Providers asked for that do not run as asked (logged as errors, exported as a metric).
        self.fallbacks: tuple[ProviderMismatch, ...] = opened.mismatches
        self.memory_limit: MemoryLimit = opened.memory
        self.provider: str = self.session.get_providers()[0]
        self.device = "cuda" if self.provider in GPU_PROVIDERS else "cpu"
        outputs = tuple(o.name for o in self.session.get_outputs())
        version = str(model_version(model) or hashlib.sha256(raw).hexdigest()[:12])
        self.info = ModelInfo(model_path.stem, version, spec, outputs, names, head, rows)
        static = self.info.static_batch
        self.buckets = (static,) if static else batch_buckets(self.options.max_batch)
        self._local = threading.local()
        # Output shapes and dtypes per bucket, once a bucket has run (not for end-to-end heads,
        # whose outputs are copied each run): new slots of that bucket bind outputs at once.
        self.output_layouts: dict[int, OutputLayout] = {}
        self.warmed_up = False
        if static:
            log.warning(static_batch_note(self.info, self.options.max_batch))
        if self.options.frame_format.pixel_format is not self.info.input.pixel_format:
            log.warning(
                "model %s takes uint8 NHWC itself, so its graph gets no I420 input step: I420 "
                "frames are converted to RGB on the host (FRAMEBUS_FRAME_FORMAT=rgb for its "
                "decoders saves that)",
                self.info.name,
            )

    def _limit_words(self) -> str:
        limit = self.memory_limit
        if limit.enforced_by is LimitedBy.CPU_ARENA:
            return f"the cpu memory arena limit of {limit.limit_bytes} bytes ({CPU_KNOB})"
        if limit.enforced_by is LimitedBy.NONE:
            return f"the {self.device} memory (no limit holds with {self.provider} first)"
        return f"the cuda memory arena limit of {limit.limit_bytes} bytes ({GPU_KNOB})"

    @property
    def arena_limit_bytes(self) -> int:
        """The memory limit that holds for the provider in use (0 = none)."""
        return self.memory_limit.limit_bytes

    def _new_slot(self, bucket: int) -> InputSlot:
        device = (self.device, self.options.device_id)
        known = self.output_layouts.get(bucket)
        return InputSlot(self.session, self.info, device, bucket, known)

    def _slot(self, bucket: int) -> InputSlot:
        slots: dict[int, InputSlot] | None = getattr(self._local, "slots", None)
        if slots is None:
            slots = self._local.slots = {}
        slot = slots.get(bucket)
        if slot is None:
            slot = slots[bucket] = self._new_slot(bucket)
        return slot

    def decoder(self, max_detections: int = 300) -> Decoder:
        """The decoder of this engine's outputs, at the thresholds it was built with."""
        opts = self.options
        return Decoder(
            self.info.head,
            opts.confidence_threshold,
            opts.iou_threshold,
            max_detections,
            self.info.candidates,
        )

    def warm_up(self) -> dict[int, float]:
        """Run every bucket a few times on this thread; return the last run's ms per bucket.

        The first run allocates the bucket's buffers and arena; the next ones are still slower
        than steady state on some providers, and would otherwise be paid by the first frames.
        Each bucket's outputs are then decoded once: a head that cannot be decoded (a dynamic
        output dim hid it at load) is refused here, with a ModelError, before any frame.
        """
        timings: dict[int, float] = {}
        decoder = self.decoder()
        for bucket in self.buckets:
            for _ in range(WARM_UP_RUNS):
                started = time.perf_counter()
                outputs = self._run(self._slot(bucket), bucket)
                timings[bucket] = (time.perf_counter() - started) * 1000
            decoder.check(outputs, bucket)
        self.warmed_up = True
        log.info(
            "warm-up done",
            extra={
                "provider": self.graph_provider,
                "registered_provider": self.provider,
                "kernel_time_share": time_shares(self.provider_times),
                "ms_per_bucket": timings,
            },
        )
        return timings

    @property
    def graph_provider(self) -> str:
        """The provider that ran most of the graph in the first run (before it: the registered)."""
        return graph_provider(self.provider_times, self.provider)

    def _end_profiling(self) -> None:
        with self._profile_lock:
            if not self._profiling:
                return
            self._profiling = False
            self.provider_times = provider_times(take_profile(self.session))
        note = idle_note(self.provider_times, self.provider)
        if note is not None:
            log.warning(note)

    def __del__(self) -> None:
        # An engine that never ran: its session would write its profile when destroyed. A
        # destructor has no one to report to (at interpreter exit modules may be gone already):
        # what fails here leaves at most a file in the temp directory.
        if getattr(self, "_profiling", False):
            with contextlib.suppress(Exception):
                take_profile(self.session)

    def infer(
        self,
        frames: Sequence[bytes | npt.NDArray[np.uint8]],
        records: Sequence[Frame] | None = None,
    ) -> list[npt.NDArray[Any]]:
        """Infer a batch of uint8 frames; return the outputs of the padded bucket.

        Each frame is in the pixel format and colour of its record in `records` (without
        records: in the format the input takes, `info.input.pixel_format`; (H, W, 3) for RGB).

        With a static batch B and more than B frames, the batch runs as calls of B frames whose
        outputs are gathered into arrays of at least n rows. The returned arrays are this thread's
        reused buffers: read them before the next call.
        """
        n = len(frames)
        if n == 0:
            raise ValueError("empty batch")
        step = self.info.static_batch
        if step is None or n <= step:
            return self._infer_bucket(frames, records)
        rows = -(-n // step) * step
        gathered: list[npt.NDArray[Any]] = []
        for start in range(0, n, step):
            part = None if records is None else records[start : start + step]
            outputs = self._infer_bucket(frames[start : start + step], part)
            gathered = self._gather(gathered, outputs, start, rows)
        return gathered

    def _gather(
        self,
        gathered: list[npt.NDArray[Any]],
        outputs: list[npt.NDArray[Any]],
        start: int,
        rows: int,
    ) -> list[npt.NDArray[Any]]:
        """Copy one static-batch call's outputs into rows `start:` of this thread's buffers."""
        if start == 0:
            gathered = self._gather_buffers(outputs, rows)
        for buf, out in zip(gathered, outputs, strict=True):
            if buf.shape[1:] != out.shape[1:]:
                raise InferenceError(
                    f"the model's output changed shape between calls ({buf.shape[1:]} then "
                    f"{out.shape[1:]}), so its static batch of {self.info.static_batch} cannot be "
                    "looped over a larger batch: export with dynamic=True or set "
                    f"FRAMEBUS_MAX_BATCH={self.info.static_batch}"
                )
            buf[start : start + out.shape[0]] = out
        return gathered

    def _gather_buffers(self, outputs: list[npt.NDArray[Any]], rows: int) -> list[npt.NDArray[Any]]:
        bufs: list[npt.NDArray[Any]] | None = getattr(self._local, "gathered", None)
        if bufs is None or any(
            b.shape[0] < rows or b.shape[1:] != o.shape[1:] or b.dtype != o.dtype
            for b, o in zip(bufs, outputs, strict=True)
        ):
            step = self.info.static_batch or 1
            capacity = max(rows, -(-self.options.max_batch // step) * step)
            bufs = self._local.gathered = [
                np.empty((capacity, *o.shape[1:]), o.dtype) for o in outputs
            ]
        return bufs

    def input_slot(self, n: int) -> InputSlot:
        """A fresh bound input for a batch of `n` frames (a dynamic-batch model's bucket).

        The pipeline's receive thread writes each frame of a closed batch into one, so the
        infer thread only runs the model (`infer_slot`); slots are reused, never freed.
        """
        return self._new_slot(bucket_for(n, self.buckets))

    def infer_slot(self, slot: InputSlot, n: int) -> list[npt.NDArray[Any]]:
        """Infer the first `n` frames already written into `slot.staging` (the rest: padding).

        The returned arrays are the slot's own output buffers: read them before reusing it.
        """
        return self._run(slot, n)

    def _infer_bucket(
        self, frames: Sequence[bytes | npt.NDArray[np.uint8]], records: Sequence[Frame] | None
    ) -> list[npt.NDArray[Any]]:
        n = len(frames)
        slot = self._slot(bucket_for(n, self.buckets))
        slot.fill(frames, records)
        return self._run(slot, n)

    def _run(self, slot: InputSlot, n: int) -> list[npt.NDArray[Any]]:
        # Every binding call is inside: run_with_iobinding wraps a failed run in RuntimeError,
        # but the copy to the device and the output calls raise the binding's own classes.
        try:
            return self._run_unguarded(slot)
        except ORT_ERRORS as exc:
            raise self._explain(exc, n, slot.bucket) from exc
        finally:
            if self._profiling:
                self._end_profiling()

    def _run_unguarded(self, slot: InputSlot) -> list[npt.NDArray[Any]]:
        if self.device != "cpu":
            slot.input.update_inplace(slot.staging)
        with self.cpu.run():
            self.session.run_with_iobinding(slot.binding)
        if slot.outputs is None:
            if self.info.head is HeadFormat.END2END:  # data-dependent shapes: copy each time
                return list(slot.binding.copy_outputs_to_cpu())
            first = slot.preallocate_outputs()
            self.output_layouts[slot.bucket] = slot.layout or []
            return first
        return slot.outputs

    def _explain(self, exc: BaseException, n: int, bucket: int) -> ModelError:
        text = str(exc) or type(exc).__name__
        if is_memory_failure(exc):
            return EngineMemoryError(
                f"a batch of {n} frames (bucket {bucket}) does not fit in "
                f"{self._limit_words()}; raise the limit or lower FRAMEBUS_MAX_BATCH. "
                f"ONNX Runtime said: {text.splitlines()[0][:300]}"
            )
        return InferenceError(
            f"inference of a batch of {n} frames failed ({type(exc).__name__}): {text[:500]}"
        )


def model_version(model: onnx.ModelProto) -> str | None:
    """The `version` the model's metadata names, if any."""
    return next((p.value for p in model.metadata_props if p.key == "version" and p.value), None)
