"""Which provider ran the graph, from the profiled first run, not the registered one.

TensorRT can be registered first and take no node; the log and /metrics named it all the same.
No GPU here: the profile of such a run is written out below as ONNX Runtime writes one (a Node
event per kernel, naming its provider), and the CPU engine's own profiled first run is read.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from framebus_inferencer.engine import Engine
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.ranby import graph_provider, idle_note, provider_times, time_shares
from framebus_inferencer.settings import Provider
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import StatsCollector
from framebus_tools.synthetic import bright_square_model

TRT, CUDA, CPU = (p.ort_name for p in (Provider.TENSORRT, Provider.CUDA, Provider.CPU))


def node(name: str, provider: str, dur: int) -> dict[str, object]:
    return {
        "cat": "Node",
        "name": f"{name}_kernel_time",
        "dur": dur,
        "args": {"provider": provider},
    }


# TensorRT registered first, every node on CUDA but a Shape on the CPU.
TRT_IDLE = [
    {"cat": "Session", "name": "session_initialization", "dur": 9000, "args": {}},
    node("Conv_0", CUDA, 700),
    node("Conv_0_fence_before", CUDA, 1) | {"name": "Conv_0_fence_before"},
    node("Sigmoid_1", CUDA, 200),
    node("Shape_2", CPU, 100),
]


def test_provider_times_when_tensorrt_ran_no_node_then_cuda_ran_the_graph() -> None:
    times = provider_times(TRT_IDLE)
    assert times == {CUDA: 900.0, CPU: 100.0}
    assert graph_provider(times, TRT) == CUDA
    assert time_shares(times) == {CPU: 0.1, CUDA: 0.9}
    note = idle_note(times, TRT)
    assert note is not None and note.startswith(f"{TRT} is registered first but ran none")


def test_provider_times_when_nothing_profiled_then_the_registered_provider() -> None:
    assert graph_provider({}, TRT) == TRT
    assert idle_note({}, TRT) is None
    assert idle_note({TRT: 5.0, CPU: 1.0}, TRT) is None


def test_engine_when_warmed_up_then_its_profiled_first_run_names_the_provider_and_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    path = tmp_path / "m.onnx"
    onnx.save(bright_square_model(32), str(path))
    engine = Engine(path, EngineOptions(providers=(Provider.CPU,), max_batch=2))
    with caplog.at_level(logging.INFO, logger="framebus_inferencer.engine"):
        engine.warm_up()
    assert engine.graph_provider == CPU and engine.provider_times[CPU] > 0
    assert list(engine.provider_times) == [CPU]
    assert engine.session.end_profiling() == ""  # only the first run was profiled
    assert list((tmp_path / "tmp").iterdir()) == []  # its file read and deleted
    (done,) = [r for r in caplog.records if r.getMessage() == "warm-up done"]
    assert done.provider == CPU and done.kernel_time_share == {CPU: 1.0}  # type: ignore[attr-defined]


def test_metrics_when_tensorrt_registered_but_cuda_ran_the_graph_then_both_exported() -> None:
    stats = InferencerStats(
        provider=CUDA, registered_provider=TRT, provider_time_share={CUDA: 0.9, CPU: 0.1}
    )
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert f'framebus_inferencer_provider{{provider="{CUDA}"}} 1.0' in text
    assert f'framebus_inferencer_provider_registered{{provider="{TRT}"}} 1.0' in text
    assert f'framebus_inferencer_provider_time_share{{provider="{CUDA}"}} 0.9' in text
