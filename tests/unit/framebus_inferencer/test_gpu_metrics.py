"""The GPU memory gauges of /metrics: there with NVML (the `gpu` extra) on a GPU, absent without."""

import logging
import os
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from framebus_inferencer import gpu
from framebus_inferencer import telemetry as metrics
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import StatsCollector

REPO = Path(__file__).resolve().parents[3]
GPU_LINES = ('kind="gpu_used"', 'kind="gpu_device_used"', 'kind="gpu_total"')


def scrape(stats: InferencerStats) -> str:
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


@pytest.fixture(autouse=True)
def fresh_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML is initialised, and devices looked up, once per process: each test starts before."""
    monkeypatch.setattr(gpu, "_started", None)
    monkeypatch.setattr(gpu, "_handles", {})
    monkeypatch.setattr(gpu, "cuda_pci_bus_id", lambda _device: None)  # no CUDA runtime here
    monkeypatch.setattr(metrics, "_warned", False)


def fake_nvml(
    used: int, total: int, calls: list[str], mine: int | None = None, count: int = 1
) -> SimpleNamespace:
    """Stands in for nvidia-ml-py's `pynvml`: `count` GPUs, this process using `mine` of gpu0."""

    def processes(handle: str) -> list[SimpleNamespace]:
        if mine is None or handle != "gpu0":
            return [SimpleNamespace(pid=1, usedGpuMemory=used // 2)]
        return [
            SimpleNamespace(pid=1, usedGpuMemory=1),
            SimpleNamespace(pid=os.getpid(), usedGpuMemory=mine),
        ]

    return SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlDeviceGetCount=lambda: count,
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetHandleByUUID=lambda u: f"gpu{u[-1]}",
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(
            busId=f"00000000:{int(h[-1]) + 0x17:02X}:00.0"
        ),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=used, total=total),
        nvmlDeviceGetComputeRunningProcesses=processes,
    )


def test_metrics_when_nvml_not_installed_on_gpu_provider_then_gpu_gauges_omitted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    stats = InferencerStats(provider="CUDAExecutionProvider", arena_limit_bytes=1 << 30)
    with caplog.at_level(logging.WARNING, logger="framebus_inferencer.telemetry"):
        text = scrape(stats)
        scrape(stats)  # asked once per process, not per scrape
    assert 'framebus_inferencer_memory_bytes{kind="process_rss"}' in text
    assert 'framebus_inferencer_memory_bytes{kind="arena_limit"} 1.073741824e+09' in text
    assert not any(line in text for line in GPU_LINES)
    assert caplog.messages == [
        "no GPU memory metric of this process: nvidia-ml-py is not installed: "
        "pip install 'framebus[gpu]'"
    ]
    assert "nvml" not in stats.errors  # an absent extra is not an error to count


def test_metrics_when_nvml_finds_no_gpu_then_gpu_gauges_omitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_driver() -> None:
        raise OSError("NVML Shared Library Not Found")

    broken = SimpleNamespace(nvmlInit=no_driver)
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    text = scrape(InferencerStats(provider="TensorrtExecutionProvider"))
    assert 'kind="process_rss"' in text
    assert not any(line in text for line in GPU_LINES)


def test_metrics_when_nvml_lists_this_process_then_its_memory_as_gpu_used_and_the_device_beside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(3 << 30, 80 << 30, calls, mine=1 << 30))
    text = scrape(InferencerStats(provider="CUDAExecutionProvider"))
    assert 'framebus_inferencer_memory_bytes{kind="gpu_used"} 1.073741824e+09' in text
    assert 'framebus_inferencer_memory_bytes{kind="gpu_device_used"} 3.221225472e+09' in text
    assert 'framebus_inferencer_memory_bytes{kind="gpu_total"} 8.589934592e+10' in text
    assert calls == ["init"]


def test_metrics_when_nvml_does_not_list_this_process_then_no_gpu_used_and_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(3 << 30, 80 << 30, []))
    with caplog.at_level(logging.WARNING, logger="framebus_inferencer.telemetry"):
        text = scrape(InferencerStats(provider="CUDAExecutionProvider"))
        scrape(InferencerStats(provider="CUDAExecutionProvider"))
    assert 'kind="gpu_used"' not in text  # not the whole device's, under this process's name
    assert 'framebus_inferencer_memory_bytes{kind="gpu_device_used"} 3.221225472e+09' in text
    (said,) = caplog.messages
    assert f"NVML does not list this process (pid {os.getpid()})" in said


def test_gpu_when_cuda_device_is_not_nvml_index_then_found_by_pci_bus_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CUDA's device 0 is NVML's second GPU (CUDA orders fastest first): bus 0x18, not 0x17.
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(3 << 30, 80 << 30, [], count=2))
    monkeypatch.setattr(gpu, "cuda_pci_bus_id", lambda device: "0000:18:00.0")
    assert gpu.device_handle(0) == ("gpu1", "")


def test_gpu_when_several_devices_and_no_bus_id_then_uuid_of_cuda_visible_devices_or_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "GPU-aaaa-1,GPU-bbbb-0"}
    assert gpu.nvml_key(1, None, env, 2) == ("uuid", "GPU-bbbb-0")
    assert gpu.nvml_key(0, "0000:18:00.0", env, 2) == ("pci", "0000:18:00.0")
    assert gpu.nvml_key(0, None, {}, 1) == ("index", "0")  # the only GPU NVML sees
    why = gpu.nvml_key(0, None, {"CUDA_VISIBLE_DEVICES": "1,0"}, 2)
    assert isinstance(why, str) and "cannot tell which of NVML's 2 devices" in why
    assert gpu.normal_bus_id(b"00000000:18:00.0") == gpu.normal_bus_id("0000:18:00.0")


def test_metrics_when_cpu_provider_then_nvml_not_asked_and_no_gpu_gauges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(1, 2, calls))
    text = scrape(InferencerStats(provider="CPUExecutionProvider"))
    assert not any(line in text for line in GPU_LINES)
    assert calls == []


def test_gpu_extra_when_declared_then_it_brings_nvml_and_the_gpu_image_installs_it() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert any(r.startswith("nvidia-ml-py") for r in project["optional-dependencies"]["gpu"])
    dockerfile = (REPO / "services" / "inferencer" / "Dockerfile").read_text(encoding="utf-8")
    assert 'pip install "$(echo /wheels/framebus-*.whl)[gpu]"' in dockerfile
    assert 'python -c "import pynvml"' in dockerfile  # the build fails without the bindings
