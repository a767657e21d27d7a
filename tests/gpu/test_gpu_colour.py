"""The I420 input step of the graph on a real GPU: run by TensorRT or CUDA, as the CPU runs it.

Marked `gpu` (see test_gpu_engine.py for what they need). They have not run yet: no GPU was lent
where they were written (issue #41).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from framebus.messages import PixelFormat
from framebus.pixels import COLOURS, FrameFormat, rgb_to_i420
from framebus_inferencer.engine import Engine
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.settings import Provider
from framebus_tools.synthetic import write_bright_square_model
from tests.unit.framebus_inferencer.frames import record

pytestmark = pytest.mark.gpu

TRT, CUDA, CPU = (p.ort_name for p in (Provider.TENSORRT, Provider.CUDA, Provider.CPU))
SIZE = 64


def passthrough(path: Path) -> Path:
    """A model whose output is its float input, so the outputs are the converted pixels."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["images"], ["out"])],
        "passthrough",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 3, SIZE, SIZE])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def engine_on(path: Path, providers: tuple[Provider, ...], tmp_path: Path) -> Engine:
    opts = EngineOptions(
        providers=providers,
        max_batch=4,
        frame_format=FrameFormat.I420,
        require_gpu=providers[0] is not Provider.CPU,
        trt_cache_dir=tmp_path / "trt",
    )
    engine = Engine(path, opts)
    engine.warm_up()
    return engine


@pytest.mark.parametrize(
    ("providers", "ran_by"),
    [
        ((Provider.TENSORRT, Provider.CUDA, Provider.CPU), TRT),
        ((Provider.CUDA, Provider.CPU), CUDA),
    ],
    ids=["tensorrt", "cuda"],
)
def test_i420_input_when_on_the_gpu_then_it_runs_there_and_converts_as_the_cpu(
    tmp_path: Path, providers: tuple[Provider, ...], ran_by: str
) -> None:
    model = passthrough(tmp_path / "passthrough.onnx")
    gpu_engine, cpu_engine = (
        engine_on(model, providers, tmp_path),
        engine_on(model, (Provider.CPU,), tmp_path),
    )
    assert gpu_engine.graph_provider == ran_by, gpu_engine.provider_times
    rng = np.random.default_rng(0)
    frames = [rgb_to_i420(rng.integers(0, 256, (SIZE, SIZE, 3), np.uint8)) for _ in COLOURS]
    i420 = record(SIZE, PixelFormat.I420)
    records = [replace(i420, colour_matrix=c.matrix, colour_range=c.range) for c in COLOURS]
    on_gpu = gpu_engine.infer(frames, records)[0]
    on_cpu = cpu_engine.infer(frames, records)[0]
    # TensorRT may compute in float16 (trt_fp16): within 2 levels of 255.
    assert np.abs(on_gpu - on_cpu).max() * 255 <= 2.0


def test_i420_input_when_tensorrt_runs_the_bright_square_then_the_cpu_boxes(
    tmp_path: Path,
) -> None:
    model = write_bright_square_model(tmp_path / "square.onnx", SIZE)
    trt = engine_on(model, (Provider.TENSORRT, Provider.CUDA, Provider.CPU), tmp_path)
    cpu = engine_on(model, (Provider.CPU,), tmp_path)
    frame = np.full((SIZE, SIZE, 3), 24, np.uint8)
    frame[8:40, 16:48] = 235
    i420 = [rgb_to_i420(frame)]
    found = [Decoder(e.info.head).decode(e.infer(i420), 1)[0].boxes.tolist() for e in (trt, cpu)]
    assert found[0] == found[1] == [[16.0, 8.0, 48.0, 40.0]]
