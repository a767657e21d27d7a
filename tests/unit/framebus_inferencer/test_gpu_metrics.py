"""The GPU memory gauges of /metrics: there with NVML (the `gpu` extra) on a GPU, absent without."""

import logging
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from framebus_inferencer import gpu, metrics
from framebus_inferencer.metrics import StatsCollector
from framebus_inferencer.stats import InferencerStats

REPO = Path(__file__).resolve().parents[3]
GPU_LINES = ('framebus_inferencer_memory_bytes{kind="gpu_used"}', 'kind="gpu_total"')


def scrape(stats: InferencerStats) -> str:
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


@pytest.fixture(autouse=True)
def fresh_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML is initialised once per process: each test starts before that."""
    monkeypatch.setattr(gpu, "_started", None)
    monkeypatch.setattr(metrics, "_warned", False)


def fake_nvml(used: int, total: int, calls: list[str]) -> SimpleNamespace:
    """Stands in for nvidia-ml-py's `pynvml` on a machine with one GPU."""
    return SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=used, total=total),
    )


def test_metrics_when_nvml_not_installed_on_gpu_provider_then_gpu_gauges_omitted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    stats = InferencerStats(provider="CUDAExecutionProvider", arena_limit_bytes=1 << 30)
    with caplog.at_level(logging.WARNING, logger="framebus_inferencer.metrics"):
        text = scrape(stats)
        scrape(stats)  # asked once per process, not per scrape
    assert 'framebus_inferencer_memory_bytes{kind="process_rss"}' in text
    assert 'framebus_inferencer_memory_bytes{kind="arena_limit"} 1.073741824e+09' in text
    assert not any(line in text for line in GPU_LINES)
    assert caplog.messages == [
        "no GPU memory metric: nvidia-ml-py is not installed: pip install 'framebus[gpu]'"
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


def test_metrics_when_nvml_installed_and_gpu_provider_then_gpu_used_and_total_exported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(3 << 30, 80 << 30, calls))
    text = scrape(InferencerStats(provider="CUDAExecutionProvider"))
    assert 'framebus_inferencer_memory_bytes{kind="gpu_used"} 3.221225472e+09' in text
    assert 'framebus_inferencer_memory_bytes{kind="gpu_total"} 8.589934592e+10' in text
    assert calls == ["init"]


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
    assert 'pip install "${wheel}[gpu]"' in dockerfile
    assert 'python -c "import pynvml"' in dockerfile  # the build fails without the bindings
