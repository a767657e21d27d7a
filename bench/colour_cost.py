"""The cost the in-graph I420 -> RGB conversion adds to the engine, on ONNX Runtime's CPU provider.

On one process, 640 x 640 frames, medians of `--runs` timings taken in turn (RGB, I420, RGB, ...)
so that a busy neighbour weighs on both alike:
- prefix: the input step alone in front of an Identity, batch 16: the RGB one (DequantizeLinear of
  uint8 planes) against the I420 one (colourgraph.py);
- near-free engine, batch 16: framebus's engine, staging included (RGB: split into planes; I420:
  one copy of the planes and the colour code), with each input step: what the conversion adds to
  a drain of `framebus inferencer` at GPU speed, per frame;
- YOLOv8n-like engine, batch 4: the same on a model of real size (random weights): the
  conversion's share of a CPU deployment's engine time.

No goal: the figures say which `frame_format` a CPU-only deployment should choose
(docs/inferencer.md); on a GPU the conversion runs on the device.

    .venv/bin/python -m bench.colour_cost [--runs 9]
"""

from __future__ import annotations

import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from bench.benchkit import SIZE, U8, print_header, runs_from_command_line
from bench.engine_steps import identity_model
from framebus.pixels import FrameFormat, i420_nbytes, rgb_to_i420
from framebus_inferencer.engine import Engine
from framebus_inferencer.graph import prepend_uint8_input
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import Provider
from testkit.models import near_free_model, yolov8n_like_model

BATCH = 16
REAL_BATCH = 4  # a YOLOv8n-sized model on 2 cores: a few hundred ms a batch


def medians(calls: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median ms of each call over `runs` rounds, the calls taken in turn within a round."""
    for call in calls.values():
        call()  # allocations, first-run profiling
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(runs):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(t) for name, t in times.items()}


def frames_of(rgb: list[U8]) -> dict[FrameFormat, list[U8]]:
    """The same pictures as the decoder sends them in each format (flat, as received)."""
    return {
        FrameFormat.RGB: [f.reshape(-1) for f in rgb],
        FrameFormat.I420: [rgb_to_i420(f) for f in rgb],
    }


def prefix(frames: dict[FrameFormat, list[U8]], runs: int) -> None:
    """Each input step alone, on a batch already in the bound input's layout."""
    calls: dict[str, Callable[[], object]] = {}
    for fmt in (FrameFormat.RGB, FrameFormat.I420):
        model, _ = prepend_uint8_input(identity_model(), frame_format=fmt)
        session = ort.InferenceSession(
            model.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        if fmt is FrameFormat.RGB:
            batch = np.stack([f.reshape(SIZE, SIZE, 3).transpose(2, 0, 1) for f in frames[fmt]])
        else:
            batch = np.stack([np.append(f, np.uint8(0)) for f in frames[fmt]])
        feed = {"x": batch}
        calls[fmt.value] = functools.partial(session.run, None, feed)
    t = medians(calls, runs)
    print(
        f"input step alone, batch {BATCH}: rgb {t['rgb'] / BATCH:.2f} ms/frame, i420 "
        f"{t['i420'] / BATCH:.2f} ms/frame; the conversion adds "
        f"{(t['i420'] - t['rgb']) / BATCH:.2f} ms/frame"
    )


def engines(
    model: onnx.ModelProto, batch: int, frames: dict[FrameFormat, list[U8]], runs: int
) -> dict[str, float]:
    """framebus's engine on `model` with each input step; median ms per frame."""
    calls: dict[str, Callable[[], object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, path)
        for fmt in (FrameFormat.RGB, FrameFormat.I420):
            options = EngineOptions(providers=(Provider.CPU,), max_batch=batch, frame_format=fmt)
            engine = Engine(path, options)
            engine.warm_up()
            part = frames[fmt][:batch]
            calls[fmt.value] = functools.partial(engine.infer, part)
        return {k: v / batch for k, v in medians(calls, runs).items()}


def report(name: str, batch: int, t: dict[str, float]) -> None:
    added = t["i420"] - t["rgb"]
    print(
        f"{name} engine, batch {batch}: rgb {t['rgb']:.2f} ms/frame, i420 {t['i420']:.2f} "
        f"ms/frame; the conversion adds {added:.2f} ms/frame ({added / t['rgb']:+.1%}); "
        f"i420 / rgb = {t['i420'] / t['rgb']:.2f}"
    )


def main() -> int:
    runs = runs_from_command_line(__doc__)
    print_header()
    pictures = np.random.default_rng(0).integers(0, 256, (BATCH, SIZE, SIZE, 3), dtype=np.uint8)
    frames = frames_of(list(pictures))
    assert frames[FrameFormat.I420][0].size == i420_nbytes(SIZE, SIZE)
    prefix(frames, runs)
    report("near-free", BATCH, engines(near_free_model(SIZE), BATCH, frames, runs))
    real = engines(yolov8n_like_model(SIZE), REAL_BATCH, frames, max(3, runs // 3))
    report("YOLOv8n-like", REAL_BATCH, real)
    return 0


if __name__ == "__main__":
    sys.exit(main())
