"""Tune, then load-test at a fraction of the tuned capacity: p99 end-to-end latency vs its goal.

Each run measures its own baseline: `framebus tune` on a YOLOv8n-sized model (random weights,
about 8.7 GFLOPs at 640x640, generated here) with one engine thread, then `framebus loadtest` of
N looped real-time cameras through the real decoder, broker and inferencer at `--load-fraction`
(0.8) of the capacity tune just measured, with tune's recommended max_batch, max_wait_ms and
max_frame_age_ms (from a 600 ms end-to-end budget). The figure is p99 / goal, where the goal is
max_wait_ms + 2 x the p99 batch latency tune measured; every published frame must be accounted
for (inferred or dropped as stale).

Goal: median p99 / goal <= 1.0.

    .venv/bin/python -m bench.tuned_loadtest [--runs 3] [--duration-s 120] [--phases even,aligned]
        [--seconds-per-batch 10] [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import onnx

from bench.benchkit import add_bootstrap_argument, parser_for, print_header, verdict
from framebus.kafka.settings import KafkaSettings
from framebus_tools.perf.loadtest import (
    CameraPhases,
    LoadtestResult,
    LoadtestSettings,
    run_loadtest,
)
from framebus_tools.perf.tune import TuneSettings, engine_factory, run_tune
from framebus_tools.perf.tunereport import write_outputs
from testkit.models import conv_gflops, yolov8n_like_model


def one_run(
    kafka: KafkaSettings, model: Path, out: Path, args: argparse.Namespace, phases: CameraPhases
) -> LoadtestResult:
    """`framebus tune`, then `framebus loadtest` with its recommendation."""
    tune = TuneSettings(
        model_path=model,
        providers=("cpu",),
        max_batch_limit=8,
        seconds_per_batch=args.seconds_per_batch,
        latency_budget_ms=args.latency_budget_ms,
        compare_layouts=False,
        threads=1,
        output_dir=out / "tune",
    )
    write_outputs(run_tune(tune, engine_factory(tune), lambda _step: None), tune)
    return run_loadtest(
        LoadtestSettings(
            kafka=kafka,
            cameras=args.cameras,
            camera_phases=phases,
            duration_s=args.duration_s,
            video_width=320,
            video_height=240,
            tune_json=out / "tune" / "tune.json",
            load_fraction=args.load_fraction,
            output_dir=out / "loadtest",
        ),
        progress=lambda _line: None,
    )


def main() -> int:
    parser = parser_for(__doc__)
    add_bootstrap_argument(parser)
    parser.add_argument("--runs", type=int, default=3, help="runs per phase setting (median)")
    parser.add_argument("--cameras", type=int, default=4)
    parser.add_argument("--load-fraction", type=float, default=0.8)
    parser.add_argument("--duration-s", type=float, default=120.0)
    parser.add_argument("--latency-budget-ms", type=float, default=600.0)
    parser.add_argument(
        "--seconds-per-batch", type=float, default=10.0, help="tune's measuring time per batch"
    )
    parser.add_argument("--phases", default="even", help="comma-separated: even, aligned")
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "yolov8n-like-640.onnx"
        model = yolov8n_like_model(640)
        onnx.save(model, str(model_path))
        print_header()
        print(
            f"model: YOLOv8n-sized, {conv_gflops(model):.2f} GFLOPs at 640x640, 1 engine thread; "
            f"{args.cameras} cameras (320x240 H.264, real time, looped) at "
            f"{args.load_fraction:.0%} of tuned capacity for {args.duration_s:g} s per run"
        )
        print(
            f"{'phases':>8} {'run':>3} {'capacity/s':>10} {'batch':>5} {'wait ms':>7} "
            f"{'age ms':>6} {'p50 ms':>7} {'p99 ms':>7} {'goal ms':>7} {'p99/goal':>8} "
            f"{'stale %':>7} {'accounted':>9}"
        )
        for name in args.phases.split(","):
            phases = CameraPhases(name.strip())
            ratios = []
            for run in range(args.runs):
                r = one_run(kafka, model_path, Path(tmp) / f"{name}-{run}", args, phases)
                g = r.goal or {}
                ratios.append(g["p99_ms"] / g["p99_goal_ms"])
                print(
                    f"{name:>8} {run + 1:>3} {g['capacity_fps']:>10.2f} "
                    f"{r.settings['max_batch']:>5} {float(r.settings['max_wait_ms']):>7.0f} "
                    f"{g['max_frame_age_ms']:>6.0f} {r.latency_ms['p50']:>7.0f} {g['p99_ms']:>7.0f} "
                    f"{g['p99_goal_ms']:>7.0f} {ratios[-1]:>8.2f} "
                    f"{100 * r.by_status.get('DROPPED_STALE', 0) / max(1, r.published):>7.1f} "
                    f"{'yes' if r.unaccounted == 0 else 'NO':>9}",
                    flush=True,
                )
            median = statistics.median(ratios)
            print(f"{name:>8} median p99/goal {median:.2f}; {verdict(median, 1.0, at_most=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
