"""Engine errors as ONNX Runtime raises them: its binding's own classes, and TensorRT's texts.

ONNX Runtime's Python binding turns a failed status into one of its own classes (EPFail for a
TensorRT engine that fails to build as the session is created, NotImplemented for a node with no
kernel...), none of them a RuntimeError; `run_with_iobinding` (1.32) wraps a failed run in
RuntimeError("Error in execution: ...") with the EP's text, e.g. TensorRT's "OutOfMemory". There
is no GPU here: the real CPU session is wrapped in one whose run raises what the binding raises
there, and a real CPU model with a node ONNX Runtime has no kernel for stands for a load failure.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from framebus.errors import ModelError
from framebus.messages import Frame, FrameStatus, TensorLayout
from framebus.telemetry.health import Health
from framebus_inferencer.batcher import Batch, CloseReason, Pending
from framebus_inferencer.engine import Engine, EngineMemoryError, InferenceError
from framebus_inferencer.orterrors import binding_errors, is_memory_failure
from framebus_inferencer.pipeline.context import StageContext
from framebus_inferencer.pipeline.control import Control
from framebus_inferencer.pipeline.handoff import Publication, StageQueue, Work
from framebus_inferencer.pipeline.infer import Inference
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.records import Received
from framebus_inferencer.settings import InferencerSettings, Provider
from framebus_inferencer.stats import InferencerStats
from framebus_tools.synthetic import bright_square_model

STATE = ort.capi.onnxruntime_pybind11_state
SIZE = 32
# What TensorRT says when its memory runs out (its ErrorCode name), as ORT passes it on.
TRT_OOM = (
    "[ONNXRuntimeError] : 11 : EP_FAIL : TensorRT EP execution context enqueue failed. "
    "Error Code 2: OutOfMemory (Requested size was 1073741824 bytes.)"
)
RUN_OOM = "Error in execution: " + TRT_OOM  # how run_with_iobinding wraps it


class FailingSession:
    """A real session whose runs raise `exc`."""

    def __init__(self, real: ort.InferenceSession, exc: BaseException) -> None:
        self._real = real
        self._exc = exc

    def run_with_iobinding(self, *args: Any) -> None:
        raise self._exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def engine_raising(tmp_path: Path, exc: BaseException) -> Engine:
    path = tmp_path / "m.onnx"
    onnx.save(bright_square_model(SIZE), str(path))
    engine = Engine(path, EngineOptions(providers=(Provider.CPU,), max_batch=4))
    engine.session = FailingSession(engine.session, exc)  # type: ignore[assignment]
    return engine


def test_binding_errors_when_listed_then_every_class_the_binding_defines_none_a_runtime_error() -> (
    None
):
    names = {c.__name__ for c in binding_errors()}
    assert {"EPFail", "EngineError", "Fail", "RuntimeException", "NotImplemented"} <= names
    # Why they must be listed: an `except RuntimeError` misses every one of them.
    assert not any(issubclass(c, RuntimeError) for c in binding_errors())


@pytest.mark.parametrize(
    ("exc", "memory"),
    [
        (RuntimeError(RUN_OOM), True),
        (STATE.EPFail(TRT_OOM), True),
        (STATE.Fail("Failed to allocate memory for requested buffer of size 4096"), True),
        (STATE.RuntimeException("CUDA failure 2: out of memory"), True),
        (STATE.EPFail("CUDNN failure 4: CUDNN_STATUS_ALLOC_FAILED"), True),
        (MemoryError(), True),
        (STATE.EPFail("TensorRT EP failed to create engine from network."), False),
        (RuntimeError("Error in execution: EP_FAIL : TensorRT EP execution failed"), False),
        (STATE.EngineError("engine error"), False),
        (STATE.NotImplemented("Could not find an implementation"), False),
    ],
)
def test_engine_when_a_binding_class_is_raised_then_engine_error_memory_ones_as_memory(
    tmp_path: Path, exc: BaseException, memory: bool
) -> None:
    engine = engine_raising(tmp_path, exc)
    with pytest.raises(EngineMemoryError if memory else InferenceError) as err:
        engine.infer([np.zeros((SIZE, SIZE, 3), np.uint8)] * 3)
    assert is_memory_failure(exc) is memory
    assert "a batch of 3 frames" in str(err.value)
    if memory:
        assert "FRAMEBUS_" in str(err.value)  # names the knob to change
    else:
        assert type(exc).__name__ in str(err.value)


def with_unimplemented_node(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with Relu on int16 before it: valid ONNX, but ONNX Runtime has no such kernel."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        node.input[:] = ["images_back" if i == "images" else i for i in node.input]
    extra = [
        helper.make_node("Cast", ["images"], ["images_i16"], to=TensorProto.INT16),
        helper.make_node("Relu", ["images_i16"], ["images_relu"]),
        helper.make_node("Cast", ["images_relu"], ["images_back"], to=TensorProto.FLOAT),
    ]
    nodes = [*extra, *out.graph.node]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    onnx.checker.check_model(out)
    return out


def test_engine_when_onnxruntime_refuses_the_model_with_a_binding_class_then_model_error(
    tmp_path: Path,
) -> None:
    # NotImplemented (not a RuntimeError) escaped the load handler: a traceback, not exit 2.
    path = tmp_path / "no-kernel.onnx"
    onnx.save(with_unimplemented_node(bright_square_model(SIZE)), str(path))
    with pytest.raises(ModelError, match="cannot load ONNX model .*NOT_IMPLEMENTED"):
        Engine(path, EngineOptions(providers=(Provider.CPU,)))


class StubMessage:
    """The parts of a consumed Kafka message the records read."""

    def __init__(self, offset: int) -> None:
        self._offset = offset

    def topic(self) -> str:
        return "frames"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes]]:
        return []


def pending(seq: int) -> Pending[Received]:
    tensor = np.zeros((SIZE, SIZE, 3), np.uint8)
    frame = Frame(
        camera_id="cam",
        seq=seq,
        capture_ts_us=time.time_ns() // 1000,
        orig_width=SIZE,
        orig_height=SIZE,
        shape=(SIZE, SIZE, 3),
        layout=TensorLayout.HWC,
        scale=1.0,
        pad_x=0,
        pad_y=0,
        tensor=tensor.tobytes(),
    )
    received = Received(StubMessage(seq), frame, tensor.reshape(-1))  # type: ignore[arg-type]
    return Pending("cam", frame.capture_ts_us, 0.0, 0, seq, received)


def test_inference_when_tensorrt_fails_a_batch_then_its_frames_failed_with_reason_not_a_crash(
    tmp_path: Path,
) -> None:
    engine = engine_raising(tmp_path, RuntimeError(RUN_OOM))
    control = Control(Health())
    stats = InferencerStats()
    inbox: StageQueue[Work] = StageQueue(control, maxsize=1)
    out: StageQueue[Publication] = StageQueue(control, maxsize=1)
    ctx = StageContext(
        InferencerSettings(),
        control,
        stats,
        tracing=BatchTracing("frames", "group"),
        clock_ms=lambda: 0.0,
    )
    inference = Inference(ctx, inbox, out, engine)
    batch = Batch((pending(0), pending(1)), (), 0.0, CloseReason.FULL)
    publication = inference.process(Work(batch))
    assert len(publication.records) == 2 and len(publication.offsets) == 2
    assert stats.by_status == {FrameStatus.FAILED.value: 2}
    assert stats.errors == {"EngineMemoryError": 1}
    assert control.first_failure is None  # the pipeline goes on
    codec = inference.codec
    for record in publication.records:
        det = codec.decode(record.value)
        assert det.status is FrameStatus.FAILED
        assert det.reason is not None and "OutOfMemory" in det.reason
