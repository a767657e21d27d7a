"""The inferencer's engine steps at GPU speed, each against a baseline measured in the same run.

On one process, batch 16 of 640x640 frames, medians of `--runs` timings:
- staging write: one (H, W, 3) frame split into its planes by cv2.split in place against the plain
  copy it replaced, per frame;
- input step: (H, W, 3) uint8 frames to the model's float NCHW input, framebus's way (each frame
  split into its planes by cv2.split as it is written into the bound input, then
  DequantizeLinear) against the interleaved way it replaced (each frame copied as it is, then
  Transpose -> DequantizeLinear in the graph); both with IO binding into reused outputs;
- input prefix: DequantizeLinear (framebus's CPU form) against Cast -> Mul (the form kept where
  TensorRT may run the graph);
- engine: the near-free model behind framebus's prefix and IO binding against the same model fed
  ready float32 NCHW (what the prefix costs on a CPU);
- decode: the YOLOv8 head decode of those outputs (all-zero scores), per frame;
- candidate filter: after each engine call (the head just written, as in the pipeline), the
  anchors any class of which reaches the threshold found by a compare and an OR down the class
  rows (what `Decoder` does) against numpy's max over the class rows (what it did before);
- head size and the cache: the engine and the candidate filter at batch 4 against batch 16, per
  frame: a batch-4 head (11.3 MB) stays in this VM's 32 MiB L3 for the filter, a batch-16 one
  (45.2 MB) does not;
- score filter: each anchor's best class score taken inside the graph (a ReduceMax appended to
  the near-free model, head kept as an output) against the same run plus numpy's max over the
  class rows (what `Decoder` did before the candidate filter above);
- spinning: a YOLOv8n-like model alone at batch 4 with ONNX Runtime's intra-op spinning on
  against off (`FRAMEBUS_INTRA_OP_SPINNING`).

    python bench/engine_steps.py [--runs 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from framebus_inferencer.engine import Engine
from framebus_inferencer.graph import prepend_uint8_input
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import Provider
from framebus_tools.perf.tune import machine_info
from framebus_tools.testmodels import near_free_model, yolov8n_like_model

BATCH = 16
SIZE = 640
SMALL_BATCH = 4  # a head of 4 frames (11.3 MB) fits the L3 (32 MiB here); one of 16 (45.2 MB) not


def median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()  # first run: allocations
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def identity_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "prefix", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def prefix_session(dequantize: bool) -> ort.InferenceSession:
    """Only framebus's input prefix (planar uint8 input), in front of an Identity."""
    surgered, _ = prepend_uint8_input(identity_model(), dequantize=dequantize)
    return ort.InferenceSession(surgered.SerializeToString(), providers=["CPUExecutionProvider"])


def interleaved_input(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (float NCHW `images`) behind the prefix framebus used before: uint8 NHWC input,
    Transpose -> DequantizeLinear in the graph."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for node in graph.node:
        node.input[:] = ["images_f" if i == "images" else i for i in node.input]
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.asarray(1 / 255, np.float32), "images_scale"),
            numpy_helper.from_array(np.asarray(0, np.uint8), "images_zero"),
        ]
    )
    prefix = [
        helper.make_node("Transpose", ["images"], ["images_t"], perm=[0, 3, 1, 2]),
        helper.make_node(
            "DequantizeLinear", ["images_t", "images_scale", "images_zero"], ["images_f"]
        ),
    ]
    nodes = prefix + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.input[:]
    graph.input.append(
        helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", SIZE, SIZE, 3])
    )
    return out


def input_step(
    model: onnx.ModelProto, frames: list[npt.NDArray[np.uint8]], planar: bool
) -> Callable[[], object]:
    """Write `frames` into a reused bound input (split into planes or copied), then run `model`
    with its output bound to a reused buffer: framebus's engine call, either way."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = (len(frames), 3, SIZE, SIZE) if planar else (len(frames), SIZE, SIZE, 3)
    staging = np.zeros(shape, np.uint8)
    binding = session.io_binding()
    binding.bind_ortvalue_input("images", ort.OrtValue.ortvalue_from_numpy(staging))
    binding.bind_output("output0", "cpu")
    session.run_with_iobinding(binding)
    out = np.zeros_like(binding.get_outputs()[0].numpy())
    binding.clear_binding_outputs()
    binding.bind_ortvalue_output("output0", ort.OrtValue.ortvalue_from_numpy(out))
    planes = [list(row) for row in staging]

    def step() -> object:
        for i, frame in enumerate(frames):
            if planar:
                cv2.split(frame, planes[i])
            else:
                staging[i] = frame
        session.run_with_iobinding(binding)
        return out, session  # the closure keeps the bound buffers alive

    return step


def staging_write(batch: list[npt.NDArray[np.uint8]], runs: int) -> None:
    """Print the per-frame cost of splitting frames into planes in place against copying them."""
    planar_buf = np.zeros((BATCH, 3, SIZE, SIZE), np.uint8)
    planar_rows = [list(row) for row in planar_buf]
    copy_buf = np.zeros((BATCH, SIZE, SIZE, 3), np.uint8)
    t_split = median_ms(lambda: [cv2.split(f, planar_rows[i]) for i, f in enumerate(batch)], runs)
    t_copy = median_ms(lambda: [np.copyto(copy_buf[i], f) for i, f in enumerate(batch)], runs)
    print(
        f"staging write, batch {BATCH}: cv2.split into planes {t_split / BATCH:.3f} ms/frame, "
        f"copy {t_copy / BATCH:.3f} ms/frame; split / copy = {t_split / t_copy:.2f}"
    )


def with_score_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (a YOLOv8 head `output0`) plus `scores`: each anchor's best class score."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v, np.int64), name)
        for name, v in (("sf_start", [4]), ("sf_end", [1 << 40]), ("sf_axis", [1]))
    )
    graph.node.extend(
        [
            helper.make_node("Slice", ["output0", "sf_start", "sf_end", "sf_axis"], ["sf_cls"]),
            helper.make_node("ReduceMax", ["sf_cls", "sf_axis"], ["scores"], keepdims=0),
        ]
    )
    graph.output.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, None))
    del out.opset_import[:]
    out.opset_import.append(helper.make_opsetid("", 18))  # ReduceMax with axes as an input
    return out


def engine_and_decode(
    batch: list[npt.NDArray[np.uint8]], rng: np.random.Generator, runs: int
) -> None:
    """The near-free engine against the model alone, the head decode, the candidate filter."""
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

        def run_then(
            candidates: Callable[[npt.NDArray[np.float32]], npt.ArrayLike],
            frames: list[npt.NDArray[np.uint8]] = batch,
        ) -> Callable[[], object]:
            def step() -> object:
                head = engine.infer(frames)[0]
                return [np.flatnonzero(candidates(head[i, 4:])) for i in range(len(frames))]

            return step

        def any_class(c: npt.NDArray[np.float32]) -> npt.ArrayLike:
            return np.greater_equal(c, 0.25).any(axis=0)

        t_any = median_ms(run_then(any_class), runs)
        t_max = median_ms(run_then(lambda c: c.max(axis=0) >= 0.25), runs)
        print(
            f"candidate filter after each engine call, batch {BATCH}: compare + any "
            f"{(t_any - t_engine) / BATCH:.3f} ms/frame, max over the class rows "
            f"{(t_max - t_engine) / BATCH:.3f} ms/frame (each less the engine call); any / max "
            f"= {(t_any - t_engine) / (t_max - t_engine):.2f}"
        )
        small = batch[:SMALL_BATCH]
        t_small = median_ms(lambda: engine.infer(small), runs)
        t_small_any = median_ms(run_then(any_class, small), runs)
        per16 = (t_any - t_engine) / BATCH
        per4 = (t_small_any - t_small) / SMALL_BATCH
        print(
            f"head size and the cache: engine + candidate filter at batch {SMALL_BATCH} (a "
            f"{SMALL_BATCH * head_mb:.1f} MB head) {t_small / SMALL_BATCH:.3f} + {per4:.3f} "
            f"ms/frame, at batch {BATCH} ({BATCH * head_mb:.1f} MB) {t_engine / BATCH:.3f} + "
            f"{per16:.3f}; filter at {SMALL_BATCH} / at {BATCH} = {per4 / per16:.2f}"
        )


def spinning_session(model: bytes, spinning: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    print("command: python bench/engine_steps.py " + " ".join(sys.argv[1:]))
    print(f"machine: {machine_info('CPUExecutionProvider')}")
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (BATCH, SIZE, SIZE, 3), dtype=np.uint8)

    cast_mul, dequant = prefix_session(False), prefix_session(True)
    batch = list(frames)
    staging_write(batch, args.runs)
    planar_model, spec = prepend_uint8_input(near_free_model(SIZE))
    t_planar = median_ms(input_step(planar_model, batch, planar=True), args.runs)
    old_model = interleaved_input(near_free_model(SIZE))
    t_interleaved = median_ms(input_step(old_model, batch, planar=False), args.runs)
    print(
        f"input step on the near-free model, batch {BATCH}: split into planes + DequantizeLinear "
        f"{t_planar / BATCH:.3f} ms/frame, copy + Transpose + DequantizeLinear "
        f"{t_interleaved / BATCH:.3f} ms/frame; planar / interleaved = "
        f"{t_planar / t_interleaved:.2f}"
    )
    planes = np.ascontiguousarray(frames.transpose(0, 3, 1, 2))
    t_cast = median_ms(lambda: cast_mul.run(None, {"x": planes}), args.runs)
    t_dq = median_ms(lambda: dequant.run(None, {"x": planes}), args.runs)
    print(
        f"input prefix, batch {BATCH}: Cast+Mul {t_cast:.1f} ms, DequantizeLinear {t_dq:.1f} ms;"
        f" DequantizeLinear / Cast+Mul = {t_dq / t_cast:.2f}"
    )

    engine_and_decode(batch, rng, args.runs)

    scored, _ = prepend_uint8_input(with_score_output(near_free_model(SIZE)))
    plain_s, scored_s = (
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (planar_model, scored)
    )
    feed = {spec.name: planes}
    t_numpy = median_ms(lambda: plain_s.run(None, feed)[0][:, 4:].max(axis=1), args.runs)
    t_graph = median_ms(lambda: scored_s.run(None, feed), args.runs)
    print(
        f"score filter, batch {BATCH}: run + numpy max {t_numpy / BATCH:.2f} ms/frame, in-graph "
        f"ReduceMax {t_graph / BATCH:.2f} ms/frame; in graph / numpy = {t_graph / t_numpy:.2f}"
    )

    model = yolov8n_like_model(SIZE).SerializeToString()
    on, off = spinning_session(model, True), spinning_session(model, False)
    x = {on.get_inputs()[0].name: rng.random((4, 3, SIZE, SIZE), np.float32)}
    spin_runs = max(3, args.runs // 3)
    t_on = median_ms(lambda: on.run(None, x), spin_runs)
    t_off = median_ms(lambda: off.run(None, x), spin_runs)
    print(
        f"YOLOv8n-like alone, batch 4: spinning {4000 / t_on:.1f} img/s, not spinning "
        f"{4000 / t_off:.1f} img/s; spinning / not = {t_off / t_on:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
