"""What the benchmarks and diagnostics share, so that none imports another.

The command and machine header, the arguments every benchmark takes, and medians of per-run
ratios live here; the rest lives in modules of its own and is imported back below, so that
`from bench.benchkit import ...` keeps working: fresh topics and frame records
(`benchkit_topics`), CPU readings from /proc (`benchkit_proc`), the bare consumer that is the
inferencer side's baseline (`benchkit_consumer`) and the `framebus inferencer` subprocess
(`benchkit_inferencer`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import av
import confluent_kafka
import cv2

from bench.benchkit_consumer import (
    Consumed,
    Share,
    bare_consume,
    bare_consume_process,
    bare_consume_processes,
    no_boxes,
    relay_batch,
    split_shares,
)
from bench.benchkit_inferencer import (
    CPU_SAMPLE_S,
    UsageSamples,
    inferencer_env,
    run_inferencer,
    usage_between,
)
from bench.benchkit_proc import (
    CORES,
    TICK_S,
    broker_pids,
    host_usage,
    listening_pids,
    others_cores,
    process_tree_usage,
    process_usage,
)
from bench.benchkit_topics import (
    IMAGES,
    SIZE,
    SOURCE,
    U8,
    delete_topics,
    encode_frame,
    fill_frames,
    fresh_topics,
    prepared_tensors,
    read_detections,
)
from framebus_tools.perf.tune import machine_info

# Imported back from the modules that hold them, for the benchmarks that import them from here.
__all__ = [
    "CORES",
    "CPU_SAMPLE_S",
    "IMAGES",
    "SIZE",
    "SOURCE",
    "TICK_S",
    "U8",
    "Consumed",
    "Share",
    "UsageSamples",
    "add_bootstrap_argument",
    "bare_consume",
    "bare_consume_process",
    "bare_consume_processes",
    "broker_pids",
    "command_line",
    "delete_topics",
    "encode_frame",
    "fill_frames",
    "fresh_topics",
    "host_usage",
    "inferencer_env",
    "listening_pids",
    "no_boxes",
    "others_cores",
    "parser_for",
    "prepared_tensors",
    "print_header",
    "print_median_ratio",
    "process_tree_usage",
    "process_usage",
    "program",
    "ratios",
    "read_detections",
    "relay_batch",
    "run_inferencer",
    "runs_from_command_line",
    "runs_text",
    "split_shares",
    "usage_between",
    "verdict",
]


# ---------------------------------------------------------------------------------------------
# Header, arguments, medians


def program() -> str:
    """How this program is started, as a reader would type it: `python -m bench.x`."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    start = ["-m", spec.name] if spec is not None else [sys.argv[0]]
    return " ".join([Path(sys.executable).name, *start])


def command_line() -> str:
    """This process's command line, as a reader would type it."""
    return " ".join([program(), *sys.argv[1:]])


def print_header(provider: str | None = "CPUExecutionProvider") -> dict[str, Any]:
    """Print the command and the machine with the versions that matter here; return the machine.

    `provider`: the ONNX Runtime execution provider the figures use (None: no engine runs).
    """
    machine = machine_info(provider or "-")
    machine["confluent_kafka"] = confluent_kafka.__version__
    machine["librdkafka"] = confluent_kafka.libversion()[0]
    print("command:", command_line())
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores; {machine['date']}; "
        f"Python {machine['python']}; onnxruntime {machine['onnxruntime']}"
        f"{f' ({provider})' if provider else ''}; "
        f"confluent-kafka {machine['confluent_kafka']}, librdkafka {machine['librdkafka']}; "
        f"PyAV {av.__version__}; OpenCV {cv2.__version__}",
        flush=True,
    )
    return machine


def parser_for(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose --help shows the module's docstring (what, goal, command)."""
    return argparse.ArgumentParser(
        prog=program(), description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def runs_from_command_line(doc: str | None, default: int = 9) -> int:
    """`--runs` (timings per figure, their median) of a benchmark that takes nothing else."""
    parser = parser_for(doc)
    parser.add_argument("--runs", type=int, default=default, help="timings per figure (median)")
    runs: int = parser.parse_args().runs
    return runs


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    """--bootstrap, defaulting to FRAMEBUS_BOOTSTRAP_SERVERS or the test broker."""
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("FRAMEBUS_BOOTSTRAP_SERVERS", "127.0.0.1:29092"),
        help="Kafka bootstrap servers (default: FRAMEBUS_BOOTSTRAP_SERVERS or 127.0.0.1:29092)",
    )


def ratios(subject: Sequence[float], base: Sequence[float]) -> list[float]:
    """subject / baseline of each run (both lists in run order)."""
    return [s / b for s, b in zip(subject, base, strict=True)]


def runs_text(values: Sequence[float]) -> str:
    """'0.81, 0.77, 0.90': each run's figure, for the line that gives their median."""
    return ", ".join(f"{v:.2f}" for v in values)


def verdict(value: float, goal: float, *, at_most: bool = False) -> str:
    """'goal >= 0.80: met' (or `<=` with `at_most`, or MISSED)."""
    met = value <= goal if at_most else value >= goal
    return f"goal {'<=' if at_most else '>='} {goal:g}: {'met' if met else 'MISSED'}"


def print_median_ratio(label: str, per_run: Sequence[float], goal: float | None = None) -> float:
    """Print the median of per-run ratios, the runs, and the goal's verdict; return the median."""
    ratio = statistics.median(per_run)
    goal_text = f"; {verdict(ratio, goal)}" if goal is not None else ""
    print(f"{label}: ratio {ratio:.3f} (median of per-run {runs_text(per_run)}){goal_text}")
    return ratio
