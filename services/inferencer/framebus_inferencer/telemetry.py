"""The inferencer's telemetry: `InferencerStats` exported, readiness from its `RunState`.

Histograms are in seconds (Prometheus convention); the older `*_ms` quantile gauges of recent
samples stay for dashboards that read them.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.families import counters, gauges, info
from framebus.telemetry.service import ServiceTelemetry
from framebus_inferencer import gpu
from framebus_inferencer.state import RunState
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.supervision import Pool

log = logging.getLogger(__name__)

GPU_PROVIDERS = ("CUDAExecutionProvider", "TensorrtExecutionProvider")


class StatsCollector:
    """Reads the stats object at scrape time; the hot path only bumps plain counters."""

    def __init__(self, stats: InferencerStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """Metric families for one scrape."""
        s, p = self.stats, "framebus_inferencer"
        yield counters(f"{p}_frames", "Frames by final status", ["status"], s.by_status)
        yield counters(f"{p}_batches", "Inferred batches by size", ["size"], s.batch_sizes)
        yield counters(f"{p}_errors", "Handled errors by kind", ["kind"], s.errors)
        yield counters(
            f"{p}_frames_converted_on_host",
            "Frames converted on the host: their pixel format is not the one the model graph "
            "takes (FRAMEBUS_FRAME_FORMAT differs between decoders and inferencers)",
            ["format"],
            s.converted_on_host_by_format,
        )
        yield counters(
            f"{p}_frames_dropped",
            "Frames answered without inference, by reason (stale, failed)",
            ["reason"],
            s.drops_by_reason,
        )
        for name, doc, value in (
            ("frames_received", "Frame messages consumed", s.frames_received),
            ("dead_letters", "Dead-lettered messages", s.dead_letters),
            (
                "commit_window_waits",
                "Batches that waited for a commit before delivery (a partition's window was full)",
                s.commit_window_waits,
            ),
        ):
            yield CounterMetricFamily(f"{p}_{name}", doc, value=value)
        for name, series in (
            ("queue_wait_ms", s.queue_wait_ms),
            ("inference_ms", s.inference_ms),
            ("e2e_latency_ms", s.e2e_latency_ms),
        ):
            recent = sorted(series)
            quantiles = {
                str(q): recent[int(q * (len(recent) - 1))] if recent else 0.0 for q in (0.5, 0.99)
            }
            yield gauges(f"{p}_{name}", f"Recent {name} quantiles", ["quantile"], quantiles)
        yield from self._engine()
        yield from self._histograms()
        yield from self._lag()
        yield self._memory()

    def _engine(self) -> Iterator[Metric]:
        s, p = self.stats, "framebus_inferencer"
        yield info(
            f"{p}_provider",
            "Execution provider that ran the graph (most kernel time in the first, profiled run; "
            "the registered one before it)",
            "provider",
            s.provider,
        )
        yield info(
            f"{p}_provider_registered",
            "The session's first registered execution provider (it may run no node)",
            "provider",
            s.registered_provider,
        )
        yield gauges(
            f"{p}_provider_time_share",
            "Fraction of the first run's node kernel time per execution provider",
            ["provider"],
            s.provider_time_share,
        )
        yield gauges(
            f"{p}_provider_fallbacks",
            "1 for each execution provider asked for that does not run as asked: failed (its "
            "session creation raised), not_loaded (ONNX Runtime left it out), options (it "
            "loaded with other options); the log says why",
            ["provider", "kind"],
            dict.fromkeys(s.provider_fallbacks, 1),
        )
        yield info(
            f"{p}_engine_batch_mode",
            "How a batch runs: batched (one call per batch) or loop (the model has a static "
            "batch: one call per framebus_inferencer_model_static_batch frames)",
            "mode",
            s.batch_mode,
        )
        yield info(
            f"{p}_candidate_selection",
            "Where a frame's candidate boxes are selected: device (in the model graph: a raw "
            "YOLO head's top-K, or an end-to-end head) or host (the whole head is copied back)",
            "where",
            s.candidate_selection,
        )
        yield GaugeMetricFamily(
            f"{p}_candidate_selection_fallback",
            "1 when FRAMEBUS_CANDIDATE_SELECTION asks for selection in the graph (or auto with a "
            "GPU) and the graph cannot take the model's head, so the host selects; the log says why",
            value=int(s.candidate_fallback),
        )
        yield CounterMetricFamily(
            f"{p}_candidates_saturated_frames",
            "Frames whose candidate rows from the graph were all above the confidence threshold "
            "(more may have been cut: raise FRAMEBUS_MAX_CANDIDATES)",
            value=s.saturated_frames,
        )
        yield GaugeMetricFamily(
            f"{p}_model_static_batch",
            "The model's fixed batch size (0: dynamic batch)",
            value=s.static_batch,
        )
        yield gauges(
            f"{p}_arena_limit_bytes",
            "Memory limit that holds for the provider in use (0: none), the allocator that "
            "enforces it, and what it does not cover (tensorrt_engines: TensorRT's own memory)",
            ["enforced_by", "excludes"],
            {(s.arena_limit_enforced_by, s.arena_limit_excludes): s.arena_limit_bytes},
        )

    def _histograms(self) -> Iterator[Metric]:
        s = self.stats
        for hist in (s.batch_size, s.queue_wait_s, s.inference_s, s.delivered_latency_s):
            yield from _without_created(hist)

    def _lag(self) -> Iterator[Any]:
        lags = self.stats.lag.lags(time.time_ns() // 1000)
        where = ["topic", "partition"]
        yield gauges(
            "framebus_inferencer_consumer_lag_messages",
            "Frames not yet delivered per partition: high watermark - oldest unfinished offset",
            where,
            {tp: lag.messages for tp, lag in lags.items()},
        )
        yield gauges(
            "framebus_inferencer_consumer_lag_seconds",
            "Age of the oldest frame not yet delivered, per partition",
            where,
            {tp: lag.seconds for tp, lag in lags.items()},
        )

    def _memory(self) -> GaugeMetricFamily:
        s = self.stats
        memory = GaugeMetricFamily(
            "framebus_inferencer_memory_bytes",
            "Memory: process RSS, the arena limit that holds, GPU memory (NVML, gpu extra): "
            "gpu_used this process's, gpu_device_used every process's, gpu_total",
            labels=["kind"],
        )
        memory.add_metric(["process_rss"], process_rss_bytes())
        memory.add_metric(["arena_limit"], s.arena_limit_bytes)
        if {s.provider, s.registered_provider}.intersection(GPU_PROVIDERS):
            try:
                found = gpu_memory(s.device_id)
            except Exception as exc:  # noqa: BLE001 - an NVML error must not break the scrape
                s.error("nvml")
                log.warning("NVML memory query failed: %s", exc)
                found = None
            if found is not None:
                if found.process_used is not None:
                    memory.add_metric(["gpu_used"], found.process_used)
                memory.add_metric(["gpu_device_used"], found.device_used)
                memory.add_metric(["gpu_total"], found.total)
        return memory


def _without_created(hist: Histogram) -> Iterator[Metric]:
    """The histogram's families without the `_created` sample prometheus_client adds.

    /metrics exported `_bucket`, `_sum` and `_count` only; a `_created` series per histogram
    would be one more series for Prometheus to store and nothing reads it.
    """
    for family in hist.collect():
        family.samples = [x for x in family.samples if not x.name.endswith("_created")]
        yield family


def process_rss_bytes() -> int:
    """Resident memory of this process (current on Linux, peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gpu_memory(device_id: int) -> gpu.GpuMemory | None:
    """CUDA device `device_id`'s memory through NVML; None (logged once) when it cannot be read.

    Without the `gpu` extra, or without a driver, /metrics has no GPU gauges rather than wrong
    ones; without this process's own figure (NVML does not list it) no `gpu_used`, said once.
    """
    found = gpu.gpu_memory(device_id)
    global _warned  # noqa: PLW0603 - once per process, as NVML is asked once
    if not _warned and (found is None or found.process_used is None):
        why = gpu.why_no_memory(device_id) if found is None else found.process_note
        log.warning("no GPU memory metric of this process: %s", why)
        _warned = True
    return found


_warned = False


class EngineCpuCollector:
    """The CPU the engine's run calls took, read at scrape time (`enginecpu.EngineCpu`)."""

    def __init__(self, seconds: Callable[[], float]) -> None:
        self.seconds = seconds

    def collect(self) -> Iterator[Metric]:
        """One counter family."""
        yield CounterMetricFamily(
            "framebus_inferencer_engine_cpu_seconds",
            "CPU seconds inside the engine's run calls: the calling thread's and ONNX Runtime's "
            "own threads' (warm-up included); the process's CPU less this is framebus's own",
            value=self.seconds(),
        )


def inferencer_telemetry(
    port: int | None,
    stats: InferencerStats,
    state: RunState,
    kafka: KafkaSettings | None = None,
    engine_cpu_s: Callable[[], float] | None = None,
    worker: bool = False,
) -> ServiceTelemetry:
    """The inferencer's health (ready: warmed up, assigned, brokers answer), metrics, watchdog.

    `worker`: a supervisor's worker, whose port is for its supervisor only (loopback).
    """
    collectors: tuple[Any, ...] = (StatsCollector(stats),)
    if engine_cpu_s is not None:
        collectors += (EngineCpuCollector(engine_cpu_s),)
    host = "127.0.0.1" if worker else "0.0.0.0"  # noqa: S104 - probes come from outside the pod
    telemetry = ServiceTelemetry(port, collectors, kafka, host)
    telemetry.add_check("inferencer", state.not_ready)
    # The supervisor of --workers N starts the next worker once this is true.
    telemetry.health.add_detail("warmed_up", state.warmed_up.is_set)
    return telemetry


def worker_families(texts: dict[int, str]) -> list[Metric]:
    """The workers' /metrics texts as one set of families, each sample with a `worker` label.

    A family several workers export becomes one family with all their samples (a family
    repeated in the exposition is invalid).
    """
    families: dict[str, Metric] = {}
    for worker, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                families[family.name] = merged
            merged.samples += [
                s._replace(labels={**s.labels, "worker": str(worker)}) for s in family.samples
            ]
    return list(families.values())


class SupervisorCollector:
    """The supervisor's /metrics: every running worker's, scraped now, and its own."""

    def __init__(self, pool: Pool, scrape: Callable[[int], str | None]) -> None:
        self.pool, self.scrape = pool, scrape

    def collect(self) -> Iterator[Metric]:
        """Metric families for one scrape."""
        texts = {i: self.scrape(self.pool.port(i)) for i in self.pool.running()}
        yield from worker_families({i: t for i, t in texts.items() if t is not None})
        p = "framebus_inferencer"
        yield gauges(
            f"{p}_worker_ready",
            "1 while the worker's /readyz answers 200 (--workers N: one series per worker)",
            ["worker"],
            self.pool.readiness_by_worker(),
        )
        yield counters(
            f"{p}_worker_restarts",
            "Workers started again by their supervisor, by how they ended (stalled: the "
            "watchdog's exit 70; SIGKILL; exit_<code>)",
            ["worker", "reason"],
            self.pool.restarts(),
        )


def supervisor_telemetry(
    port: int | None, pool: Pool, scrape: Callable[[int], str | None]
) -> ServiceTelemetry:
    """The supervisor's health (ready: every worker ready), the workers' metrics, its watchdog."""
    telemetry = ServiceTelemetry(port, (SupervisorCollector(pool, scrape),))
    telemetry.add_check("workers", pool.not_ready)
    telemetry.health.add_detail("workers", pool.describe)
    return telemetry
