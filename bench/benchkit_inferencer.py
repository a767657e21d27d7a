"""`framebus inferencer` as a benchmark's subprocess: its settings, its run, its sampled CPU.

A drain runs the real service on a fresh consumer group until it stops on idle, while its CPU,
page faults, the host's and the broker's CPU are sampled, so that a window of the drain can be
costed afterwards by interpolating between the samples.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from bench.benchkit_proc import broker_pids, host_usage, process_usage
from framebus.kafka.settings import KafkaSettings
from framebus.topology import TopicSettings
from framebus_tools.process import ServiceProcess

CPU_SAMPLE_S = 0.05  # how often a running process's CPU is read from /proc

# (wall-clock s, the process's user + system CPU s, its minor page faults, the host's busy CPU s,
# the local broker's CPU s)
UsageSamples = list[tuple[float, float, int, float, float]]


def inferencer_env(
    kafka: KafkaSettings, names: TopicSettings, model: Path, max_batch: int
) -> dict[str, str]:
    """A drain's settings: a fresh group (it starts at the earliest offset), no staleness."""
    return {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_MODEL_PATH": str(model),
        "FRAMEBUS_MAX_BATCH": str(max_batch),
        "FRAMEBUS_CONSUMER_GROUP": f"bench-fb-{uuid.uuid4().hex[:8]}",
        # The frames were captured seconds before the drain: measure throughput, not staleness.
        "FRAMEBUS_MAX_FRAME_AGE_MS": "600000",
        "FRAMEBUS_STOP_AFTER_IDLE_S": "3",
        # `fill_frames` writes RGB records: a graph that takes them as they are.
        "FRAMEBUS_FRAME_FORMAT": "rgb",
        "FRAMEBUS_PROVIDERS": "cpu",
        # As with a GPU provider (what `auto` does there): the engine's CPU threads do not spin
        # between runs, so the cores stay with Kafka and the pipeline's other stages.
        "FRAMEBUS_INTRA_OP_SPINNING": "off",
        "FRAMEBUS_LOG_LEVEL": "warning",
    }


def run_inferencer(
    env: dict[str, str], log_path: Path, profile: Path | None = None, timeout_s: float = 300
) -> tuple[int, UsageSamples]:
    """Run `framebus inferencer` until it stops on idle; optionally under `py-spy record`.

    Returns its exit code and its CPU and page faults sampled every CPU_SAMPLE_S, with the host's
    and the broker's (none under py-spy, whose child it is).
    """
    wrapper: list[str] = []
    if profile is not None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        wrapper = [py_spy, "record", "--format", "raw", "-o", str(profile), "--"]
    samples: UsageSamples = []
    brokers = broker_pids(env.get("FRAMEBUS_BOOTSTRAP_SERVERS"))
    log_path.unlink(missing_ok=True)
    proc = ServiceProcess("inferencer", env, log_path, wrapper=wrapper)
    deadline = time.monotonic() + timeout_s
    while (code := proc.exit_code()) is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise subprocess.TimeoutExpired("framebus inferencer", timeout_s)
        usage = process_usage(proc.pid) if profile is None else None
        if usage is not None:
            samples.append((time.time(), *usage, *host_usage(brokers)))
        time.sleep(CPU_SAMPLE_S)
    return code, samples


def usage_between(samples: UsageSamples, t0: float, t1: float) -> tuple[float, float, float, float]:
    """CPU s, minor faults, host busy CPU s and broker CPU s between t0 and t1, interpolated.

    nan for all if the samples do not cover that window.
    """
    if len(samples) < 2 or not samples[0][0] <= t0 <= t1 <= samples[-1][0]:
        nan = float("nan")
        return nan, nan, nan, nan
    times = [s[0] for s in samples]

    def between(column: int) -> float:
        values = [s[column] for s in samples]
        return float(np.interp(t1, times, values) - np.interp(t0, times, values))

    return between(1), between(2), between(3), between(4)
