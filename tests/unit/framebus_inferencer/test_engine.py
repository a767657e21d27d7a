"""Engine tests on small generated ONNX models run by the real ONNX Runtime (CPU)."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from framebus_inferencer.engine import Engine
from framebus_inferencer.graph import prepend_uint8_input
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.session import ProviderFallbackError
from framebus_inferencer.settings import HeadFormat, Provider
from testkit.models import end2end_model, end2end_nms_model, yolov5_model, yolov8_model

NAMES = ("person", "car", "dog")


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def frames(n: int, size: int = 32) -> list[np.ndarray]:
    return [np.full((size, size, 3), 7 * i, np.uint8) for i in range(n)]


def run_engine(path: Path, n: int = 3, max_batch: int = 4):
    engine = Engine(path, EngineOptions(max_batch=max_batch))
    engine.warm_up()
    outputs = engine.infer(frames(n))
    return engine, engine.decoder().decode(outputs, n)


def test_engine_when_yolov5_model_then_head_detected_and_boxes_parsed(tmp_path: Path) -> None:
    rows = np.zeros((3, 5 + 3), np.float32)
    rows[0] = [16, 16, 8, 8, 0.9, 0.1, 0.9, 0.0]  # class car, 0.81
    rows[1] = [17, 16, 8, 8, 0.8, 0.1, 0.9, 0.0]  # duplicate, suppressed
    rows[2] = [4, 4, 2, 2, 0.9, 0.0, 0.0, 0.5]  # dog, 0.45
    engine, dets = run_engine(save(yolov5_model(rows, names=NAMES), tmp_path / "v5.onnx"))
    assert engine.info.head is HeadFormat.YOLOV5 and engine.info.class_names == NAMES
    assert len(dets) == 3
    for det in dets:
        np.testing.assert_allclose(det.boxes, [[12, 12, 20, 20], [3, 3, 5, 5]])
        np.testing.assert_allclose(det.scores, [0.81, 0.45], rtol=1e-5)
        assert det.class_ids.tolist() == [1, 2]


def test_engine_when_yolov8_model_then_head_detected_and_boxes_parsed(tmp_path: Path) -> None:
    rows = np.zeros((4 + 3, 5), np.float32)
    rows[:, 0] = [10, 10, 4, 6, 0.0, 0.0, 0.7]
    engine, dets = run_engine(save(yolov8_model(rows, names=NAMES), tmp_path / "v8.onnx"), n=1)
    assert engine.info.head is HeadFormat.YOLOV8
    np.testing.assert_allclose(dets[0].boxes, [[8, 7, 12, 13]])
    assert dets[0].class_ids.tolist() == [2]


def test_engine_when_end2end_model_then_rows_taken_as_is(tmp_path: Path) -> None:
    dets_in = np.array([[1, 2, 3, 4, 0.9, 1], [5, 6, 7, 8, 0.1, 0]], np.float32)
    engine, dets = run_engine(save(end2end_model(dets_in, names=NAMES), tmp_path / "e2e.onnx"))
    assert engine.info.head is HeadFormat.END2END
    np.testing.assert_allclose(dets[0].boxes, [[1, 2, 3, 4]])
    assert dets[0].class_ids.tolist() == [1]


def test_engine_when_efficient_nms_outputs_then_count_respected(tmp_path: Path) -> None:
    boxes = np.array([[1, 1, 9, 9], [2, 2, 6, 6], [0, 0, 0, 0]], np.float32)
    scores = np.array([0.8, 0.6, 0.0], np.float32)
    classes = np.array([0, 2, 0], np.int32)
    model = end2end_nms_model(boxes, scores, classes, count=2, names=NAMES)
    engine, dets = run_engine(save(model, tmp_path / "nms.onnx"), n=2)
    assert engine.info.head is HeadFormat.END2END
    np.testing.assert_allclose(dets[1].boxes, [[1, 1, 9, 9], [2, 2, 6, 6]])
    assert dets[1].class_ids.tolist() == [0, 2]


def test_graph_surgery_when_prepended_then_uint8_planar_input_scaled_to_unit_range() -> None:
    rows = np.zeros((7, 1), np.float32)
    model, spec = prepend_uint8_input(yolov8_model(rows, input_size=16))
    (inp,) = model.graph.input
    assert inp.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert [d.dim_value for d in inp.type.tensor_type.shape.dim][1:] == [3, 16, 16]
    assert model.graph.node[0].op_type == "DequantizeLinear"
    assert "Transpose" not in [n.op_type for n in model.graph.node]
    assert (spec.height, spec.width, spec.channels, spec.planar) == (16, 16, 3, True)
    assert spec.bound_shape == (3, 16, 16)


def test_graph_surgery_when_tensorrt_may_run_it_then_cast_and_mul_not_dequantize() -> None:
    rows = np.zeros((7, 1), np.float32)
    model, _ = prepend_uint8_input(yolov8_model(rows, input_size=16), dequantize=False)
    assert [n.op_type for n in model.graph.node[:2]] == ["Cast", "Mul"]


@pytest.mark.parametrize("dequantize", [True, False])
def test_graph_surgery_when_either_form_then_same_floats_as_dividing_by_255(
    dequantize: bool,
) -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    surgered, _ = prepend_uint8_input(model, dequantize=dequantize)
    session = ort.InferenceSession(surgered.SerializeToString(), providers=["CPUExecutionProvider"])
    planes = np.arange(2 * 3 * 4 * 4, dtype=np.uint8).reshape(2, 3, 4, 4) * 2
    (out,) = session.run(None, {"x": planes})
    expected = planes.astype(np.float32) * np.float32(1 / 255)
    np.testing.assert_array_equal(out, expected)


def test_engine_when_bright_square_then_input_conversion_matches_float_model(
    square_model: Path,
) -> None:
    engine = Engine(square_model, EngineOptions(max_batch=2))
    frame = np.full((640, 640, 3), 24, np.uint8)
    frame[100:200, 300:380] = 235
    out = engine.infer([frame])
    (det,) = engine.decoder().decode(out, 1)
    np.testing.assert_allclose(det.boxes, [[300, 100, 380, 200]])


def test_engine_when_padded_bucket_then_buffers_reused_across_batches(tmp_path: Path) -> None:
    path = save(yolov8_model(np.zeros((7, 2), np.float32)), tmp_path / "m.onnx")
    engine = Engine(path, EngineOptions(max_batch=8))
    engine.warm_up()
    first = engine.infer(frames(3))[0]
    second = engine.infer(frames(4))[0]
    assert first is second and first.shape[0] == 4  # 3 frames padded to bucket 4


def test_engine_when_require_gpu_without_gpu_then_clear_error(tmp_path: Path) -> None:
    path = save(yolov8_model(np.zeros((7, 2), np.float32)), tmp_path / "m.onnx")
    opts = EngineOptions(providers=(Provider.CUDA, Provider.CPU), require_gpu=True)
    with pytest.raises(ProviderFallbackError, match="no GPU provider loaded"):
        Engine(path, opts)


def test_engine_when_cpu_arena_limit_too_small_then_error_names_limit_and_batch(
    tmp_path: Path,
) -> None:
    # ONNX Runtime allows one shared CPU arena per process: run in a fresh interpreter.
    path = save(yolov8_model(np.zeros((7, 2), np.float32), input_size=128), tmp_path / "m.onnx")
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from framebus_inferencer.engine import Engine, EngineMemoryError
        from framebus_inferencer.providers import EngineOptions
        ok = Engine(Path({str(path)!r}), EngineOptions(max_batch=1, cpu_arena_limit_bytes=8_000_000))
        ok.warm_up()  # batch 1 fits: 49 KB of uint8 and 197 KB of float
        big = Engine(Path({str(path)!r}), EngineOptions(max_batch=64, cpu_arena_limit_bytes=8_000_000))
        try:
            big.warm_up()
        except EngineMemoryError as exc:
            print("ERROR:", exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    found = re.search(r"ERROR: a batch of (\d+) frames \(bucket (\d+)\)", done.stdout)
    assert found is not None, done.stdout
    assert int(found.group(1)) > 1  # batch 1 fitted; a larger bucket hit the cap
    assert "limit of 8000000 bytes (FRAMEBUS_CPU_ARENA_LIMIT_BYTES)" in done.stdout
