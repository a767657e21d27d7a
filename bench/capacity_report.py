"""Per-run figures of `bench.capacity`'s inferencer and decoder sides and their summary: the
`Side` record each run adds to, the goals its medians are judged against, the warm-up run labels
and the medians, verdicts and JSON figures printed at the end of a run."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from bench.benchkit import (
    print_median_ratio,
    ratios,
)

GOAL = 0.80
DECODER_FORMAT_GOAL = 0.7  # issue 41: the I420 publishing path's CPU a frame / today's RGB's


@dataclass
class Side:
    """Per-run figures of one side: baseline and framebus rates, and notes on each run."""

    base: list[float] = field(default_factory=list)
    framebus: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # inferencer side only: each process's CPU ms and minor page faults per frame, the drain's
    # longest gap between batches, what else ran over each side's window (cores)
    base_cpu: list[float] = field(default_factory=list)
    framebus_cpu: list[float] = field(default_factory=list)
    base_faults: list[float] = field(default_factory=list)
    framebus_faults: list[float] = field(default_factory=list)
    framebus_gaps_ms: list[float] = field(default_factory=list)
    base_broker: list[float] = field(default_factory=list)
    framebus_broker: list[float] = field(default_factory=list)
    base_rest: list[float] = field(default_factory=list)
    framebus_rest: list[float] = field(default_factory=list)
    # decoder side only: the broker's CPU ms a frame over each side's rounds
    base_broker_ms: list[float] = field(default_factory=list)
    framebus_broker_ms: list[float] = field(default_factory=list)
    # decoder side, --frame-format i420: framebus publishing RGB (today's records) in the same
    # rounds, its CPU and the broker's ms a frame
    rgb_cpu: list[float] = field(default_factory=list)
    rgb_broker_ms: list[float] = field(default_factory=list)


def warm_up_label(run: int, warm_up: int) -> str:
    """`w1`, `w2`, ... for the warm-up runs (run -warm_up up to -1)."""
    return f"w{run + warm_up + 1}"


def median_of(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summary(name: str, base_name: str, side: Side) -> dict[str, Any]:
    """Print and return the medians and the goal verdict of one side."""
    per_run = ratios(side.framebus, side.base)
    base, fb = statistics.median(side.base), statistics.median(side.framebus)
    print(f"{name}: median {base_name} {base:.1f} f/s, framebus {fb:.1f} f/s")
    ratio = print_median_ratio(name, per_run, GOAL)
    if side.base_broker_ms:
        print(
            f"{name}: median CPU per frame, {base_name} {median_of(side.base_cpu):.3f} ms, "
            f"framebus {median_of(side.framebus_cpu):.3f} ms (this process, every thread, over "
            f"each side's rounds); the broker {median_of(side.base_broker_ms):.3f} and "
            f"{median_of(side.framebus_broker_ms):.3f} ms a frame"
        )
    elif side.base_cpu:
        print(
            f"{name}: median CPU per frame, {base_name} {median_of(side.base_cpu):.2f} ms, "
            f"framebus {median_of(side.framebus_cpu):.2f} ms (each process's own, over the "
            f"rate's window); minor page faults per frame {median_of(side.base_faults):.0f} and "
            f"{median_of(side.framebus_faults):.0f}"
        )
        print(
            f"{name}: what else ran over those windows, median cores: the broker "
            f"{median_of(side.base_broker):.2f} ({base_name}) and "
            f"{median_of(side.framebus_broker):.2f} (framebus), the rest of the host "
            f"{median_of(side.base_rest):.2f} and {median_of(side.framebus_rest):.2f}"
        )
    if side.rgb_cpu:
        cpu = ratios(side.framebus_cpu, side.rgb_cpu)
        broker = ratios(side.framebus_broker_ms, side.rgb_broker_ms)
        print(
            f"{name}: framebus publishing rgb (today's records) {median_of(side.rgb_cpu):.3f} ms "
            f"of CPU a frame, the broker {median_of(side.rgb_broker_ms):.3f}; the chosen "
            f"format / rgb, median of the per-run ratios: CPU {statistics.median(cpu):.2f} "
            f"(goal <= {DECODER_FORMAT_GOAL}: "
            f"{'met' if statistics.median(cpu) <= DECODER_FORMAT_GOAL else 'MISSED'}), "
            f"the broker {statistics.median(broker):.2f}"
        )
    return {
        "baseline_fps": side.base,
        "framebus_fps": side.framebus,
        "notes": side.notes,
        "baseline_cpu_ms_per_frame": side.base_cpu,
        "framebus_cpu_ms_per_frame": side.framebus_cpu,
        "baseline_faults_per_frame": side.base_faults,
        "framebus_faults_per_frame": side.framebus_faults,
        "framebus_longest_gap_ms": side.framebus_gaps_ms,
        "baseline_broker_cores": side.base_broker,
        "framebus_broker_cores": side.framebus_broker,
        "baseline_rest_cores": side.base_rest,
        "baseline_broker_ms_per_frame": side.base_broker_ms,
        "framebus_broker_ms_per_frame": side.framebus_broker_ms,
        "framebus_rest_cores": side.framebus_rest,
        "ratios": per_run,
        "median_baseline_fps": base,
        "median_framebus_fps": fb,
        "median_ratio": ratio,
        "goal_met": ratio >= GOAL,
    }
