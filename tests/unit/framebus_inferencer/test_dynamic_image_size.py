"""Models exported as the README says (`dynamic=True`): batch, height and width all dynamic."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from framebus.errors import ModelError
from framebus_inferencer.engine import Engine
from framebus_inferencer.graph import metadata_size, prepend_uint8_input
from framebus_inferencer.model import InputSizeError, check_input_size
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import Provider
from framebus_tools.synthetic import bright_square_model
from testkit.models import with_dynamic_image_dims

CPU = (Provider.CPU,)


def dims_of(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim]


def boxes(engine: Engine, frames: list[np.ndarray]) -> list[list[list[float]]]:
    dets = engine.decoder().decode(engine.infer(frames), len(frames))
    return [d.boxes.tolist() for d in dets]


def test_dynamic_export_when_made_then_input_is_batch_3_height_width() -> None:
    # Guards the helper: the shape Ultralytics' dynamic=True gives, or the tests prove nothing.
    model = with_dynamic_image_dims(bright_square_model(64))
    assert dims_of(model.graph.input[0]) == ["batch", 3, "height", "width"]


def test_graph_surgery_when_height_and_width_dynamic_then_pinned_to_the_configured_size() -> None:
    model = with_dynamic_image_dims(bright_square_model(64))
    surgered, spec = prepend_uint8_input(model, size=(48, 80))
    assert dims_of(surgered.graph.input[0]) == ["batch", 3, 48, 80]
    assert (spec.height, spec.width, spec.batch) == (48, 80, None)
    assert spec.exported_shape == "[N, 3, 48, 80] float32"


def test_graph_surgery_when_no_size_configured_then_the_imgsz_metadata_size() -> None:
    model = with_dynamic_image_dims(bright_square_model(96))
    _, spec = prepend_uint8_input(model)
    assert (spec.height, spec.width) == (96, 96)


def test_graph_surgery_when_dynamic_and_no_size_anywhere_then_refused_naming_the_settings() -> None:
    model = with_dynamic_image_dims(bright_square_model(64), imgsz=False)
    with pytest.raises(ModelError, match="FRAMEBUS_INPUT_WIDTH and FRAMEBUS_INPUT_HEIGHT"):
        prepend_uint8_input(model)


def test_metadata_size_when_ultralytics_forms_then_height_width() -> None:
    def with_imgsz(value: str) -> onnx.ModelProto:
        model = onnx.ModelProto()
        model.metadata_props.add(key="imgsz", value=value)
        return model

    assert metadata_size(with_imgsz("[384, 640]")) == (384, 640)
    assert metadata_size(with_imgsz("320")) == (320, 320)
    assert metadata_size(with_imgsz("not a size")) is None
    assert metadata_size(onnx.ModelProto()) is None


def test_graph_surgery_when_uint8_nhwc_input_dynamic_then_pinned_too() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, ["n", "h", "w", 3])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    surgered, spec = prepend_uint8_input(model, size=(32, 48))
    assert dims_of(surgered.graph.input[0]) == ["n", 32, 48, 3]
    assert (spec.height, spec.width, spec.dtype, spec.planar) == (32, 48, "uint8", False)


def test_engine_when_readme_dynamic_export_then_same_boxes_as_a_fixed_size_export(
    tmp_path: Path,
) -> None:
    fixed = tmp_path / "fixed.onnx"
    dynamic = tmp_path / "dynamic.onnx"
    onnx.save(bright_square_model(64), str(fixed))
    onnx.save(with_dynamic_image_dims(bright_square_model(64), imgsz=False), str(dynamic))
    frames = []
    for i in range(5):
        frame = np.full((64, 64, 3), 24, np.uint8)
        frame[3 * i : 3 * i + 12, 2 * i : 2 * i + 20] = 235
        frames.append(frame)
    opts = EngineOptions(providers=CPU, max_batch=8, input_width=64, input_height=64)
    want = boxes(Engine(fixed, opts), frames)
    got_engine = Engine(dynamic, opts)
    got_engine.warm_up()
    assert got_engine.info.input.exported_shape == "[N, 3, 64, 64] float32"
    assert boxes(got_engine, frames) == want
    assert want[4] == [[8.0, 12.0, 28.0, 24.0]]


def test_engine_when_dynamic_export_pinned_to_frames_size_then_input_size_check_passes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dynamic.onnx"
    onnx.save(with_dynamic_image_dims(bright_square_model(640)), str(path))
    engine = Engine(
        path, EngineOptions(providers=CPU, max_batch=1, input_width=96, input_height=64)
    )
    check_input_size(engine.info, 96, 64)  # pinned to the frames' size, not imgsz's 640
    with pytest.raises(InputSizeError):
        check_input_size(engine.info, 640, 640)
