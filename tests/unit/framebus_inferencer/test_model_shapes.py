"""Models as users export them: a static batch, float16 input/output, another input size."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from prometheus_client import CollectorRegistry, generate_latest

from framebus.errors import ConfigError, ModelError
from framebus.telemetry.health import Health
from framebus_inferencer import session as session_module
from framebus_inferencer.engine import Engine
from framebus_inferencer.graph import prepend_uint8_input
from framebus_inferencer.model import BatchMode, InputSizeError, check_input_size
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.control import Control
from framebus_inferencer.pipeline.handoff import Publication, StageQueue, Work
from framebus_inferencer.pipeline.infer import Inference
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import HeadFormat, InferencerSettings
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import StatsCollector
from framebus_tools.onnxedit import to_float16, with_static_batch
from framebus_tools.synthetic import bright_square_model, write_bright_square_model
from testkit.models import (
    end2end_model,
    fixed_output_model,
    with_dynamic_output_dims,
    yolov8_model,
)

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
    dets = engine.decoder().decode(outputs, len(frames))
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
    real = session_module.provider_chain

    def chain(opts: EngineOptions, *args: object) -> list[tuple[str, dict[str, object]]]:
        seen.append(opts.max_batch)  # TensorRT's profile runs from batch 1 to this
        return real(opts, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(session_module, "provider_chain", chain)
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
    dets = engine.decoder().decode(outputs, 3)
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


# --- Head recognition: decoded right, or refused before the first frame ---------------------

ONE_ANCHOR = np.array([[16], [16], [8], [8], [0.1], [0.9]], np.float32)  # [6, 1]: class 1


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def test_engine_when_yolov8_head_has_one_anchor_and_two_class_names_then_frames_decode_as_yolov8(
    tmp_path: Path,
) -> None:
    # The reported model: [N, 6, 1] was taken for YOLOv5 and the first real batch raised
    # IndexError in the infer stage. 4 box rows + 2 classes, 1 anchor, is YOLOv8.
    path = save(yolov8_model(ONE_ANCHOR, names=["a", "b"]), tmp_path / "one.onnx")
    engine = Engine(path, EngineOptions(max_batch=4))
    assert engine.info.head is HeadFormat.YOLOV8
    engine.warm_up()
    frames = [np.full((32, 32, 3), 9 * i, np.uint8) for i in range(3)]
    dets = engine.decoder().decode(engine.infer(frames), 3)
    for det in dets:
        np.testing.assert_allclose(det.boxes, [[12, 12, 20, 20]])
        assert det.class_ids.tolist() == [1]
        np.testing.assert_allclose(det.scores, [0.9], rtol=1e-6)


def test_engine_when_one_anchor_yolov8_head_has_no_class_names_then_still_yolov8(
    tmp_path: Path,
) -> None:
    # Not ambiguous: a YOLOv5 row of 1 value cannot exist, so only YOLOv8 fits [N, 6, 1].
    engine = Engine(save(yolov8_model(ONE_ANCHOR), tmp_path / "one.onnx"), EngineOptions())
    assert engine.info.head is HeadFormat.YOLOV8 and engine.info.class_names == ()
    engine.warm_up()
    (det,) = engine.decoder().decode(engine.infer([np.zeros((32, 32, 3), np.uint8)]), 1)
    assert det.class_ids.tolist() == [1]


def test_engine_when_both_heads_fit_and_no_class_names_then_refused_at_load_asking_for_head_format(
    tmp_path: Path,
) -> None:
    path = save(yolov8_model(np.zeros((7, 8), np.float32)), tmp_path / "amb.onnx")
    with pytest.raises(ModelError) as err:
        Engine(path, EngineOptions())
    assert str(err.value) == (
        "cannot tell the detector head from output shape [batch, 7, 8]: it could be yolov5 or "
        "yolov8 and the model has no class names to decide; set --head-format / "
        "FRAMEBUS_HEAD_FORMAT to the model's layout"
    )
    # Told, it runs: 3 classes, 8 anchors.
    engine = Engine(path, EngineOptions(), head=HeadFormat.YOLOV8)
    assert list(engine.warm_up()) == [1, 2, 4, 8]


def test_engine_when_no_head_layout_fits_the_output_then_refused_naming_the_shape(
    tmp_path: Path,
) -> None:
    path = save(fixed_output_model({"output0": np.zeros((4, 3), np.float32)}), tmp_path / "x.onnx")
    with pytest.raises(ModelError, match=r"output shape \[batch, 4, 3\]: it fits no layout"):
        Engine(path, EngineOptions())


def test_engine_when_head_format_contradicts_the_output_shape_then_refused_at_load(
    tmp_path: Path,
) -> None:
    path = save(yolov8_model(ONE_ANCHOR, names=["a", "b"]), tmp_path / "one.onnx")
    with pytest.raises(ModelError) as err:
        Engine(path, EngineOptions(), head=HeadFormat.YOLOV5)
    assert str(err.value).startswith(
        "--head-format / FRAMEBUS_HEAD_FORMAT is yolov5 but the model's output shape "
        "[batch, 6, 1] does not fit that layout: a YOLOv5 row needs 6 or more values"
    )


def test_engine_when_dynamic_output_dims_hide_a_wrong_head_format_then_warm_up_refuses_it(
    tmp_path: Path,
) -> None:
    model = with_dynamic_output_dims(yolov8_model(ONE_ANCHOR, names=["a", "b"]))
    path = save(model, tmp_path / "dyn.onnx")
    engine = Engine(path, EngineOptions(max_batch=2), head=HeadFormat.YOLOV5)  # load: dims unknown
    with pytest.raises(ModelError) as err:
        engine.warm_up()
    assert str(err.value).startswith(
        "the model's output shape [1, 6, 1] cannot be decoded as the yolov5 head it was taken for"
    )
    assert "--head-format / FRAMEBUS_HEAD_FORMAT" in str(err.value)
    assert not engine.warmed_up
    # Auto: unknown dims and nothing to decide by, so refused at load, not guessed.
    with pytest.raises(ModelError, match=r"output shape \[batch, output0_dim1, output0_dim2\]"):
        Engine(path, EngineOptions())


def test_inference_when_warm_up_refuses_the_head_then_pipeline_fails_before_any_frame(
    tmp_path: Path,
) -> None:
    path = save(with_dynamic_output_dims(yolov8_model(ONE_ANCHOR)), tmp_path / "dyn.onnx")
    engine = Engine(path, EngineOptions(max_batch=2), head=HeadFormat.YOLOV5)
    control = Control(Health())
    stats = InferencerStats()
    inbox: StageQueue[Work] = StageQueue(control, maxsize=1)
    out: StageQueue[Publication] = StageQueue(control, maxsize=1)
    tracing = BatchTracing("frames", "group")
    ctx = StageContext(InferencerSettings(), control, stats, tracing=tracing, clock_ms=lambda: 0.0)
    inference = Inference(ctx, inbox, out, engine)
    inference.run()  # returns: the failure is the pipeline's to raise, as one line
    assert isinstance(control.first_failure, ModelError)
    assert "[1, 6, 1] cannot be decoded as the yolov5 head" in str(control.first_failure)
    assert control.stop.is_set() and control.warmed.is_set()  # the receiver never subscribes
    assert not ctx.state.warmed_up.is_set() and stats.errors["ModelError"] == 1


def test_inferencer_cli_when_head_cannot_be_decoded_then_exit_2_with_one_line_no_traceback(
    tmp_path: Path,
) -> None:
    path = save(with_dynamic_output_dims(yolov8_model(ONE_ANCHOR)), tmp_path / "dyn.onnx")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEBUS_")}
    env = {
        **clean,
        "FRAMEBUS_BOOTSTRAP_SERVERS": "127.0.0.1:1",  # never reached: refused before consuming
        "FRAMEBUS_MODEL_PATH": str(path),
        "FRAMEBUS_HEAD_FORMAT": "yolov5",
        "FRAMEBUS_MAX_BATCH": "2",
    }
    done = subprocess.run(
        [sys.executable, "-m", "framebus_inferencer"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and '"exc"' not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert errors == [
        "python -m framebus_inferencer: error: the model's output shape [1, 6, 1] cannot be "
        "decoded as the yolov5 head it was taken for: a YOLOv5 row needs 6 or more values (4 box, "
        "objectness, class scores), not 1; set --head-format / FRAMEBUS_HEAD_FORMAT to the "
        "model's layout (yolov5, yolov8 or end2end)"
    ]
