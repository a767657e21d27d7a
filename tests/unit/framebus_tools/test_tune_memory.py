"""`framebus tune`'s memory column: GPU memory through NVML, or host RSS said as such."""

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import numpy.typing as npt
import pytest

from framebus_inferencer import gpu
from framebus_tools.perf.memory import GPU_MEMORY, HOST_RSS, memory_source
from framebus_tools.perf.tune import TuneSettings, run_tune
from framebus_tools.perf.tunereport import format_table, write_outputs


class StubRunner:
    """A runner that costs nothing, on the provider given."""

    input_height = 8
    input_width = 8

    def __init__(self, provider: str) -> None:
        self.provider = provider

    def infer(self, frames: npt.NDArray[np.uint8]) -> None:
        """Nothing to run."""


def tune(provider: str, tmp_path: Path) -> tuple[str, dict[str, object]]:
    """Run tune on the stub; return its table and its JSON."""
    settings = TuneSettings(
        max_batch_limit=2,
        seconds_per_batch=0.01,
        latency_budget_ms=1000,
        compare_layouts=False,
        output_dir=tmp_path / "tune",
    )
    result = run_tune(settings, lambda _threads: StubRunner(provider), lambda _step: None)
    write_outputs(result, settings)
    return format_table(result), json.loads((tmp_path / "tune" / "tune.json").read_text())


@pytest.fixture(autouse=True)
def fresh_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML is started, and devices looked up, once per process: each test starts before that."""
    monkeypatch.setattr(gpu, "_started", None)
    monkeypatch.setattr(gpu, "_handles", {})
    monkeypatch.setattr(gpu, "cuda_pci_bus_id", lambda _device: None)


def fake_nvml(used_bytes: int, mine: int | None = None) -> SimpleNamespace:
    """One GPU whose memory `used_bytes` is in use; `mine` of it by this process, if listed."""
    listed = [] if mine is None else [SimpleNamespace(pid=os.getpid(), usedGpuMemory=mine)]
    return SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=used_bytes, total=2 * used_bytes),
        nvmlDeviceGetComputeRunningProcesses=lambda h: listed,
    )


def test_tune_when_gpu_provider_and_nvml_not_installed_then_says_it_measured_host_rss(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    source = memory_source("CUDAExecutionProvider")
    assert source.kind == HOST_RSS and source.column == "RSS MB"
    table, doc = tune("CUDAExecutionProvider", tmp_path)
    header, *_ = table.splitlines()
    assert header.split()[-2:] == ["RSS", "MB"]
    note = (
        "peak memory is this process's host RSS, NOT GPU memory: CUDAExecutionProvider runs on "
        "the GPU but nvidia-ml-py is not installed: pip install 'framebus[gpu]'"
    )
    assert f"RSS MB: {note}" in table.splitlines()
    assert doc["memory"] == {"measured": "host_rss", "note": note}


def test_tune_when_gpu_provider_and_nvml_lists_this_process_then_peak_is_its_gpu_memory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # 5 GB in use on the device, 1.234 GB of it by this process: tune reports this process's.
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(5_000_000_000, 1_234_000_000))
    assert memory_source("TensorrtExecutionProvider").kind == GPU_MEMORY
    table, doc = tune("CUDAExecutionProvider", tmp_path)
    assert table.splitlines()[0].split()[-2:] == ["GPU", "MB"]
    assert doc["memory"] == {
        "measured": "gpu",
        "note": "peak memory is this process's GPU memory on CUDA device 0 (NVML)",
    }
    assert [p["peak_memory_mb"] for p in doc["points"]] == [1234.0, 1234.0]


def test_tune_when_nvml_does_not_list_this_process_then_device_memory_said_as_such(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(5_000_000_000))
    _, doc = tune("CUDAExecutionProvider", tmp_path)
    note = doc["memory"]["note"]  # type: ignore[index]
    assert note.startswith("peak memory is GPU memory in use on CUDA device 0 by every process")
    assert f"NVML does not list this process (pid {os.getpid()})" in note
    assert [p["peak_memory_mb"] for p in doc["points"]] == [5000.0, 5000.0]  # type: ignore[index]


def test_tune_when_cpu_provider_then_host_rss_without_asking_nvml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def must_not_run() -> None:
        raise AssertionError("NVML asked on the CPU provider")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlInit=must_not_run))
    source = memory_source("CPUExecutionProvider")
    assert (source.kind, source.note) == (
        HOST_RSS,
        "peak memory is this process's host RSS (CPU provider)",
    )
