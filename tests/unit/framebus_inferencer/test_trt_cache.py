"""TensorRT's engine cache is keyed by the model's bytes and precision, not by its graph's names.

ONNX Runtime names a cached engine after the model's file name (none: framebus passes bytes),
its input and node names and versions. Two models of one graph with different weights (a
retrained model) got one name, so a kept cache served the old model's engine. No GPU here: the
TensorRT options are the ones handed to ONNX Runtime, read where the session is created.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnxruntime as ort
import pytest

from framebus_inferencer.engine import Engine
from framebus_inferencer.providers import EngineOptions, engine_cache_key, tensorrt_options
from framebus_inferencer.settings import Provider
from testkit.models import yolov8n_like_model

pytestmark = pytest.mark.filterwarnings("ignore:Specified provider")

TRT = Provider.TENSORRT.ort_name
RealSession = ort.InferenceSession


def same_graph_other_weights() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    first, retrained = yolov8n_like_model(64, 2, seed=0), yolov8n_like_model(64, 2, seed=1)
    # Guards the premise: the same graph (names, ops, shapes), only the weights differ.
    assert [(n.name, n.op_type, list(n.input)) for n in first.graph.node] == [
        (n.name, n.op_type, list(n.input)) for n in retrained.graph.node
    ]
    assert first.SerializeToString() != retrained.SerializeToString()
    return first, retrained


def test_engine_cache_key_when_weights_or_precision_differ_then_keys_differ() -> None:
    first, retrained = (m.SerializeToString() for m in same_graph_other_weights())
    assert engine_cache_key(first, True) != engine_cache_key(retrained, True)
    assert engine_cache_key(first, True) == engine_cache_key(first, True)
    assert engine_cache_key(first, True) != engine_cache_key(first, False)
    assert engine_cache_key(first, True).endswith("-fp16")


def test_tensorrt_options_when_keyed_then_engines_in_the_entry_timing_cache_shared() -> None:
    opts = EngineOptions(trt_cache_dir=Path("/cache/trt"))
    options = tensorrt_options(opts, "images", (3, 64, 64), "0123abcd-fp16")
    assert options["trt_engine_cache_path"] == "/cache/trt/0123abcd-fp16"
    assert options["trt_timing_cache_path"] == "/cache/trt"


def test_engine_when_two_models_share_a_graph_but_not_weights_then_different_cache_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[dict[str, Any]] = []

    def sessions(model: bytes, so: Any, **kw: Any) -> ort.InferenceSession:
        asked.extend(
            o for p, o in zip(kw["providers"], kw["provider_options"], strict=True) if p == TRT
        )
        return RealSession(model, so, **kw)

    # As onnxruntime-gpu lists it; the CPU wheel's session then runs without it.
    monkeypatch.setattr(ort, "get_available_providers", lambda: [TRT, "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "InferenceSession", sessions)
    cache = tmp_path / "trt"
    opts = EngineOptions(providers=(Provider.TENSORRT, Provider.CPU), trt_cache_dir=cache)
    paths = []
    for i, model in enumerate(same_graph_other_weights()):
        path = tmp_path / "model.onnx"  # the same file name, as a retrained model replacing it
        onnx.save(model, str(path))
        before = len(asked)
        Engine(path, opts)
        paths.append(asked[before]["trt_engine_cache_path"])
        assert Path(paths[i]).parent == cache and Path(paths[i]).is_dir()
    assert paths[0] != paths[1]
