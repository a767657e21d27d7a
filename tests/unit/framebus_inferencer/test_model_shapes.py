"""Models as users export them: a static batch, float16 input/output, another input size."""

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from prometheus_client import CollectorRegistry, generate_latest

from framebus.errors import ConfigError
from framebus_inferencer import engine as engine_module
from framebus_inferencer.engine import Engine
from framebus_inferencer.graph import prepend_uint8_input
from framebus_inferencer.metrics import StatsCollector
from framebus_inferencer.model import BatchMode, InputSizeError, check_input_size
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.stats import InferencerStats
from framebus_tools.synthetic import bright_square_model, write_bright_square_model
from framebus_tools.testmodels import end2end_model, to_float16, with_static_batch

SIZE = 64


def squares(n: int) -> tuple[list[np.ndarray], list[list[float]]]:
    """`n` frames, each with a bright square at its own place, and the expected boxes."""
    frames, boxes = [], []
    for i in range(n):
        frame = np.full((SIZE, SIZE, 3), 24, np.uint8)
        x, y = 2 * i, i
        frame[y : y + 10, x : x + 20] = 235
        frames.append(frame)
        boxes.append([x, y, x + 20, y + 10])
    return frames, boxes


def detect(engine: Engine, frames: list[np.ndarray]) -> list[list[float]]:
    outputs = engine.infer(frames)
    dets = Decoder(engine.info.head).decode(outputs, len(frames))
    assert all(len(d.boxes) == 1 for d in dets)  # the shifted duplicate anchor is suppressed
    return [d.boxes[0].tolist() for d in dets]


def test_graph_surgery_when_float16_model_then_cast_and_scale_are_float16() -> None:
    model, spec = prepend_uint8_input(to_float16(bright_square_model(SIZE)))
    cast = model.graph.node[0]
    assert cast.op_type == "Cast" and cast.attribute[0].i == TensorProto.FLOAT16
    scale = next(i for i in model.graph.initializer if i.name == "images__framebus_scale")
    assert numpy_helper.to_array(scale).dtype == np.float16
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.UINT8
    assert spec.dtype == "float16" and spec.batch is None
    assert spec.exported_shape == f"[N, 3, {SIZE}, {SIZE}] float16"


def test_graph_surgery_when_static_batch_then_spec_and_uint8_input_keep_it() -> None:
    model, spec = prepend_uint8_input(with_static_batch(bright_square_model(SIZE), 1))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 3, SIZE, SIZE]
    assert spec.batch == 1 and spec.exported_shape == f"[1, 3, {SIZE}, {SIZE}] float32"


def test_static_batch_model_when_run_with_two_images_then_onnxruntime_rejects_it() -> None:
    # Guards the generated model: it must really refuse batch 2, or the loop tests prove nothing.
    model = with_static_batch(bright_square_model(SIZE), 1)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="dimensions"):
        session.run(None, {"images": np.zeros((2, 3, SIZE, SIZE), np.float32)})


def test_engine_when_static_batch_1_and_7_frames_then_looped_batch_1_calls_box_each_frame(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_bright_square_model(tmp_path / "static1.onnx", SIZE, static_batch=1)
    with caplog.at_level(logging.WARNING, logger="framebus_inferencer.engine"):
        engine = Engine(path, EngineOptions(max_batch=8))
    assert engine.buckets == (1,)
    assert engine.info.static_batch == 1 and engine.info.batch_mode is BatchMode.LOOP
    assert (
        "model static1 has a static batch of 1 (input [1, 3, 64, 64] float32): each batch of up "
        "to 8 frames runs as 8 batch-1 calls (export with dynamic=True to batch on the device)"
    ) in caplog.messages
    assert list(engine.warm_up()) == [1]
    frames, expected = squares(7)
    assert detect(engine, frames) == expected
    assert detect(engine, frames[:1]) == expected[:1]  # a batch of one: a single call


def test_engine_when_static_batch_then_provider_options_built_for_that_batch_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real = engine_module.provider_chain

    def chain(opts: EngineOptions, *args: object) -> list[tuple[str, dict[str, object]]]:
        seen.append(opts.max_batch)  # TensorRT's profile runs from batch 1 to this
        return real(opts, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "provider_chain", chain)
    Engine(write_bright_square_model(tmp_path / "s.onnx", SIZE, static_batch=1), EngineOptions())
    Engine(write_bright_square_model(tmp_path / "d.onnx", SIZE), EngineOptions(max_batch=8))
    assert seen == [1, 8]


def test_engine_when_static_batch_4_and_7_frames_then_two_padded_calls_box_each_frame(
    tmp_path: Path,
) -> None:
    path = write_bright_square_model(tmp_path / "static4.onnx", SIZE, static_batch=4)
    engine = Engine(path, EngineOptions(max_batch=8))
    assert engine.buckets == (4,)
    frames, expected = squares(7)
    first = engine.infer(frames)[0]
    assert first.shape[0] == 8  # 2 calls of 4 gathered; the padding row is ignored
    assert detect(engine, frames) == expected
    assert detect(engine, frames[:3]) == expected[:3]


def test_engine_when_static_batch_end2end_model_then_outputs_of_each_call_gathered(
    tmp_path: Path,
) -> None:
    rows = np.array([[1, 2, 3, 4, 0.9, 1]], np.float32)
    path = tmp_path / "e2e.onnx"
    onnx.save(with_static_batch(end2end_model(rows, input_size=SIZE), 1), str(path))
    engine = Engine(path, EngineOptions(max_batch=4))
    outputs = engine.infer(squares(3)[0])
    dets = Decoder(engine.info.head).decode(outputs, 3)
    assert [d.boxes.tolist() for d in dets] == [[[1, 2, 3, 4]]] * 3


def test_engine_when_float16_model_then_float16_buffers_and_same_boxes_as_float32(
    tmp_path: Path,
) -> None:
    path = write_bright_square_model(tmp_path / "half.onnx", SIZE, float16=True)
    engine = Engine(path, EngineOptions(max_batch=4))
    engine.warm_up()
    assert engine.info.input.dtype == "float16" and engine.info.batch_mode is BatchMode.BATCHED
    frames, expected = squares(3)
    outputs = engine.infer(frames)
    assert outputs[0].dtype == np.float16 and outputs[0].shape == (4, 6, 2)
    assert detect(engine, frames) == expected
    assert outputs is engine.infer(frames)  # the preallocated float16 buffers are reused


def test_check_input_size_when_frames_are_another_size_then_error_names_both_and_the_fix(
    tmp_path: Path,
) -> None:
    engine = Engine(write_bright_square_model(tmp_path / "m.onnx", SIZE), EngineOptions())
    with pytest.raises(InputSizeError) as err:
        check_input_size(engine.info, 640, 640)
    assert str(err.value) == (
        "model m takes 64x64 images (its input images is [N, 3, 64, 64] float32) but frames are "
        "letterboxed to 640x640 (FRAMEBUS_INPUT_WIDTH / FRAMEBUS_INPUT_HEIGHT): set "
        "FRAMEBUS_INPUT_WIDTH=64 FRAMEBUS_INPUT_HEIGHT=64 for the decoder and the inferencer, or "
        "export the model at 640x640"
    )
    check_input_size(engine.info, SIZE, SIZE)  # matching: fine
    check_input_size(engine.info, 0, 0)  # unset: the model's size


def test_inferencer_settings_when_only_input_width_set_then_rejected() -> None:
    with pytest.raises(ConfigError, match="FRAMEBUS_INPUT_WIDTH .* FRAMEBUS_INPUT_HEIGHT together"):
        InferencerSettings(input_width=320)
    with pytest.raises(ConfigError, match="FRAMEBUS_INPUT_HEIGHT .*between 16 and 4096"):
        InferencerSettings(input_width=320, input_height=8)
    assert InferencerSettings(input_width=320, input_height=320).input_width == 320


def test_metrics_when_static_batch_model_then_loop_mode_and_static_batch_exported() -> None:
    registry = CollectorRegistry()
    stats = InferencerStats(batch_mode="loop", static_batch=1)
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'framebus_inferencer_engine_batch_mode{mode="loop"} 1.0' in text
    assert "framebus_inferencer_model_static_batch 1.0" in text
