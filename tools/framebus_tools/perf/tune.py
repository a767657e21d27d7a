"""`framebus tune`: measure the model at batch 1, 2, 4, ... and recommend `max_batch`/`max_wait_ms`.

Measurements go through the inferencer's own engine (same providers, IO binding and uint8 input
as in service), so the figures are the ones the service will see.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from framebus.errors import ConfigError
from framebus.settings import check, setting
from framebus_tools.perf.knee import BatchPoint, Budget, Recommendation, recommend
from framebus_tools.perf.memory import HOST_RSS, MemorySource, memory_mb, memory_source


class BatchRunner(Protocol):
    """What tune needs from an engine: run one uint8 NHWC batch, know its input size."""

    input_height: int
    input_width: int
    provider: str

    def infer(self, frames: npt.NDArray[np.uint8]) -> Any:
        """Run one batch to completion."""
        ...


RunnerFactory = Callable[[int], BatchRunner]  # intra-op threads -> runner


@dataclass(frozen=True)
class TuneSettings:
    """Settings of `framebus tune`."""

    model_path: Path | None = setting(None, "ONNX model to measure.")
    providers: tuple[str, ...] = setting(
        ("tensorrt", "cuda", "cpu"),
        "Provider chain to measure with (the first that loads is used).",
    )
    trt_cache_dir: Path = setting(Path("trt-cache"), "TensorRT engine and timing cache directory.")
    max_batch_limit: int = setting(16, "Largest batch size measured (powers of two up to it).")
    # Short windows misjudge capacity on shared machines: a few seconds' windows of one model on
    # one machine disagree by a fifth or more within an hour (docs/benchmarks.md).
    seconds_per_batch: float = setting(10.0, "Measuring time per batch size (after warm-up).")
    latency_budget_ms: float = setting(200.0, "End-to-end latency budget per frame.")
    memory_budget_mb: float | None = setting(None, "Memory budget (GPU memory or process RSS), MB.")
    cameras: int = setting(0, "Target load: number of cameras.")
    fps: float = setting(0.0, "Target load: frames per second per camera.")
    knee_gain: float = setting(
        0.10, "A doubling of the batch must gain this fraction of throughput."
    )
    threads: int = setting(
        os.cpu_count() or 1, "CPU threads to give the engine (and to compare layouts)."
    )
    compare_layouts: bool = setting(True, "On the CPU, compare 1 x N threads with N x 1 thread.")
    output_dir: Path = setting(Path("tune-output"), "Where the JSON, PNG and Helm snippet go.")

    def __post_init__(self) -> None:
        check(1 <= self.max_batch_limit <= 256, "max_batch_limit", "must be between 1 and 256")
        check(self.seconds_per_batch > 0, "seconds_per_batch", "must be > 0")
        check(self.latency_budget_ms > 0, "latency_budget_ms", "must be > 0")
        check(self.threads >= 1, "threads", "must be >= 1")


@dataclass(frozen=True)
class LayoutResult:
    """Throughput of one process with N threads against N processes with one thread each."""

    threads: int
    one_process_fps: float
    n_processes_fps: float

    @property
    def better(self) -> str:
        """The layout to deploy."""
        if self.n_processes_fps > self.one_process_fps:
            return f"{self.threads} inferencers x 1 thread"
        return f"1 inferencer x {self.threads} threads"


@dataclass
class TuneResult:
    """Everything tune measured and concluded."""

    machine: dict[str, Any]
    provider: str
    points: list[BatchPoint]
    recommendation: Recommendation
    layout: LayoutResult | None = None
    files: dict[str, str] = field(default_factory=dict)
    memory: MemorySource = MemorySource(HOST_RSS, "peak memory is this process's host RSS")


class EngineRunner:
    """The inferencer's own engine (IO binding, uint8 input, buckets) as a tune runner."""

    def __init__(self, settings: TuneSettings, threads: int) -> None:
        from framebus_inferencer.engine import Engine
        from framebus_inferencer.providers import EngineOptions
        from framebus_inferencer.settings import Provider

        if settings.model_path is None:
            raise ConfigError("FRAMEBUS_MODEL_PATH (--model-path): the model to tune is required")
        self.engine = Engine(
            settings.model_path,
            EngineOptions(
                providers=tuple(Provider(p) for p in settings.providers),
                max_batch=settings.max_batch_limit,
                intra_op_threads=threads,
                trt_cache_dir=settings.trt_cache_dir,
            ),
        )
        self.input_height = self.engine.info.input.height
        self.input_width = self.engine.info.input.width
        self.provider = self.engine.provider

    def infer(self, frames: npt.NDArray[np.uint8]) -> Any:
        """Run one batch."""
        return self.engine.infer(list(frames))


def engine_factory(settings: TuneSettings) -> RunnerFactory:
    """Runners over the inferencer's engine with a given number of intra-op threads."""
    return lambda threads: EngineRunner(settings, threads)


def batch_sizes(limit: int) -> list[int]:
    """1, 2, 4, ... up to `limit`."""
    sizes, b = [], 1
    while b <= limit:
        sizes.append(b)
        b *= 2
    return sizes


def measure_batch(
    runner: BatchRunner,
    batch: int,
    seconds: float,
    warmup: int = 2,
    memory: MemorySource | None = None,
) -> BatchPoint:
    """Run `batch`-sized batches for about `seconds`; throughput, latency percentiles, peak memory."""
    memory = memory or memory_source(runner.provider)
    rng = np.random.default_rng(batch)
    frames = rng.integers(
        0, 255, (batch, runner.input_height, runner.input_width, 3), dtype=np.uint8
    )
    for _ in range(warmup):
        runner.infer(frames)
    latencies: list[float] = []
    peak = memory_mb(memory)
    start = time.perf_counter()
    while not latencies or (time.perf_counter() - start < seconds and len(latencies) < 10_000):
        t0 = time.perf_counter()
        runner.infer(frames)
        latencies.append((time.perf_counter() - t0) * 1000)
        peak = max(peak, memory_mb(memory))
    elapsed = time.perf_counter() - start
    return BatchPoint(
        batch=batch,
        throughput_fps=batch * len(latencies) / elapsed,
        p50_ms=statistics.median(latencies),
        p99_ms=float(np.percentile(latencies, 99)),
        peak_memory_mb=round(peak, 1),
    )


def measure_curve(
    runner: BatchRunner,
    sizes: Sequence[int],
    seconds: float,
    progress: Callable[[str], None],
    memory: MemorySource | None = None,
) -> list[BatchPoint]:
    """Measure every batch size in turn."""
    memory = memory or memory_source(runner.provider)
    points = []
    for b in sizes:
        progress(f"batch {b}")
        points.append(measure_batch(runner, b, seconds, memory=memory))
    return points


def _layout_worker(
    factory: RunnerFactory, batch: int, seconds: float, barrier: Any, out: Any
) -> None:
    runner = factory(1)
    measure_batch(runner, batch, 0.5)  # warm-up
    barrier.wait()
    out.put(measure_batch(runner, batch, seconds, warmup=0).throughput_fps)


def compare_layouts(
    factory: RunnerFactory, threads: int, batch: int, seconds: float
) -> LayoutResult:
    """One process with `threads` intra-op threads against `threads` one-thread processes at once."""
    one = measure_batch(factory(threads), batch, seconds).throughput_fps
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(threads)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_layout_worker, args=(factory, batch, seconds, barrier, out))
        for _ in range(threads)
    ]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=seconds * 10 + 120) for _ in procs)
    for p in procs:
        p.join()
    return LayoutResult(threads=threads, one_process_fps=one, n_processes_fps=total)


def machine_info(provider: str) -> dict[str, Any]:
    """What the figures were measured on."""
    import onnxruntime

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu
            )
    except OSError:
        cpu = cpu or "unknown CPU"  # not Linux: platform.processor() is the best we have
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "provider": provider,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def run_tune(
    settings: TuneSettings, factory: RunnerFactory, progress: Callable[[str], None]
) -> TuneResult:
    """Measure, recommend, compare CPU layouts."""
    runner = factory(settings.threads)
    memory = memory_source(runner.provider)
    points = measure_curve(
        runner, batch_sizes(settings.max_batch_limit), settings.seconds_per_batch, progress, memory
    )
    budget = Budget(
        settings.latency_budget_ms,
        settings.memory_budget_mb,
        settings.cameras,
        settings.fps,
        settings.knee_gain,
    )
    rec = recommend(points, budget)
    layout = None
    if (
        settings.compare_layouts
        and runner.provider == "CPUExecutionProvider"
        and settings.threads > 1
    ):
        progress(f"layouts at batch {rec.max_batch}")
        layout = compare_layouts(
            factory, settings.threads, rec.max_batch, settings.seconds_per_batch
        )
    return TuneResult(
        machine_info(runner.provider), runner.provider, points, rec, layout, memory=memory
    )
