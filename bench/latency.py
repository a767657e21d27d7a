"""Fixed-path latency: what a frame's trip costs beyond queue wait and inference, live cameras.

The real `framebus decoder` and `framebus inferencer` run as subprocesses on the real broker with a
near-free engine (`near_free_model`: 640x640 input, all-zero YOLOv8 head), so inference is about
nothing and what is left is framebus's own path. Each run:

1. capacity: `--capacity-cameras` generated 640x360 H.264 cameras decoded as fast as possible (not
   real time, looped) at `--fps` each; detections records/s at a reader over
   `--capacity-seconds` after a warm-up: the pipeline's capacity, measured in the same run;
2. latency, once per variant: cameras played in real time (looped), as many as give
   `--load-fraction` (0.5) of that capacity at about `--fps` each, for `--seconds` after
   `--warmup-s` seconds that are left out.

From each detections record: e2e (capture in the decoder -> record built in the inferencer), queue
wait, inference, and the fixed part = e2e - queue wait - inference: letterbox, wire encode,
produce, broker, fetch, record decode, postprocess (the capture time is stamped after the video
decode). The fixed part is split at the frame record's CreateTime (the decoder's produce(), read
back after the run): `to_produce` and `after_produce` (the Kafka hop and the rest). The publish
hop is the reader's receive time less the detections record's CreateTime. p50/p99 per run,
medians over runs. Variants: `default`, or `linger=N` (the decoder's FRAMEBUS_PRODUCER_LINGER_MS).

Goal: fixed part p50 <= 20 ms and p99 <= 50 ms at 50 % of the same run's capacity.

    .venv/bin/python -m bench.latency [--runs 3] [--seconds 20] [--variants default,linger=5]
        [--bootstrap 127.0.0.1:29092] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.benchkit import (
    add_bootstrap_argument,
    delete_topics,
    parser_for,
    print_header,
    verdict,
)
from bench.latency_pipeline import (
    SIZE,
    VIDEO_FPS,
    VIDEO_H,
    VIDEO_W,
    Variant,
    Workdir,
    parse_variant,
)
from bench.latency_records import METRICS, frame_create_times, read_for, reader, split_fixed
from framebus.kafka.settings import KafkaSettings
from framebus_tools.runstats import percentile

GOAL_P50_MS, GOAL_P99_MS = 20.0, 50.0


def capacity(work: Workdir, args: argparse.Namespace, inferencer_env: dict[str, str]) -> float:
    """Detections records/s with the cameras decoded as fast as possible (not real time)."""
    topics, procs = work.start(
        args.capacity_cameras, args.fps, False, Variant("default"), inferencer_env
    )
    consumer = reader(work.kafka, topics.detections_topic)
    try:
        deadline = time.monotonic() + 60.0  # until the first record: start-up is not capacity
        while time.monotonic() < deadline and not read_for(consumer, procs, 0.2)[1]:
            if procs.exited():
                break
        read_for(consumer, procs, args.capacity_warmup_s)
        _, received, _ = read_for(consumer, procs, args.capacity_seconds)
    finally:
        codes = procs.stop()
        consumer.close()
        delete_topics(work.kafka, topics)
    if len(received) < 2:
        raise SystemExit(
            f"capacity run got {len(received)} records; exit codes {codes}, logs in {procs.log_dir}"
        )
    return len(received) / float(args.capacity_seconds)


def latency(
    work: Workdir,
    args: argparse.Namespace,
    variant: Variant,
    cameras: int,
    fps: float,
    inferencer_env: dict[str, str],
) -> dict[str, Any]:
    """p50/p99 of each measure for one variant at the given real-time load."""
    topics, procs = work.start(cameras, fps, True, variant, inferencer_env)
    consumer = reader(work.kafka, topics.detections_topic)
    start_ms = procs.decoder_started_us / 1000
    try:
        samples, _, statuses = read_for(consumer, procs, args.warmup_s + args.seconds)
    finally:
        codes = procs.stop()
        consumer.close()
    try:
        steady = [s for s in samples if s.capture_ms >= start_ms + args.warmup_s * 1000]
        steady = split_fixed(steady, frame_create_times(work.kafka, topics.frames_topic))
    finally:
        delete_topics(work.kafka, topics)  # a run leaves ~1 GB of frames on the broker
    if not steady:
        raise SystemExit(
            f"{variant.name}: no records after warm-up; exit codes {codes}, logs in {procs.log_dir}"
        )
    figures = {
        m: {
            "p50": percentile([getattr(s, m) for s in steady], 50),
            "p99": percentile([getattr(s, m) for s in steady], 99),
        }
        for m in METRICS
    }
    return {"records": len(steady), "statuses": statuses, "ms": figures}


def median_table(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p50 and p99 of each measure: the median over the runs."""
    return {
        m: {q: statistics.median(r["ms"][m][q] for r in results) for q in ("p50", "p99")}
        for m in METRICS
    }


def fixed_verdict(fixed: dict[str, float]) -> str:
    """The fixed part's p50 and p99 against their goals."""
    return (
        f"fixed p50 {fixed['p50']:.1f} ms, {verdict(fixed['p50'], GOAL_P50_MS, at_most=True)}; "
        f"p99 {fixed['p99']:.1f} ms, {verdict(fixed['p99'], GOAL_P99_MS, at_most=True)}"
    )


def print_table(
    per_variant: dict[str, list[dict[str, Any]]],
) -> dict[str, dict[str, dict[str, float]]]:
    header = "".join(f" {m + ' p50':>16} {m + ' p99':>16}" for m in METRICS)
    print(f"{'variant':<28}{header}")
    medians = {}
    for name, results in per_variant.items():
        med = median_table(results)
        medians[name] = med
        cells = "".join(f" {med[m]['p50']:>16.1f} {med[m]['p99']:>16.1f}" for m in METRICS)
        print(f"{name:<28}{cells}")
    return medians


def parse_args() -> argparse.Namespace:
    parser = parser_for(__doc__)
    add_bootstrap_argument(parser)
    parser.add_argument("--runs", type=int, default=3, help="runs (median over them)")
    parser.add_argument(
        "--seconds", type=float, default=20.0, help="measured seconds per variant and run"
    )
    parser.add_argument(
        "--warmup-s", type=float, default=5.0, help="seconds after the decoder starts left out"
    )
    parser.add_argument(
        "--fps", type=float, default=5.0, help="frames per second sampled per camera"
    )
    parser.add_argument(
        "--load-fraction", type=float, default=0.5, help="real-time load as a fraction of capacity"
    )
    parser.add_argument("--capacity-cameras", type=int, default=4)
    parser.add_argument("--capacity-seconds", type=float, default=8.0)
    parser.add_argument("--capacity-warmup-s", type=float, default=3.0)
    parser.add_argument(
        "--max-cameras", type=int, default=12, help="most real-time cameras (videos generated)"
    )
    parser.add_argument(
        "--max-batch", type=int, default=None, help="inferencer max_batch (default: its own)"
    )
    parser.add_argument(
        "--max-wait-ms", type=float, default=None, help="inferencer max_wait_ms (default: its own)"
    )
    parser.add_argument(
        "--variants",
        default="default",
        help="comma-separated: default, or linger=N (the decoder producer's linger.ms)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    variants = [parse_variant(v) for v in args.variants.split(",")]
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    # At GPU speed (the near-free engine), as `auto` does with a GPU provider: no spinning.
    inferencer_env = {"FRAMEBUS_INTRA_OP_SPINNING": "off"}
    if args.max_batch is not None:
        inferencer_env["FRAMEBUS_MAX_BATCH"] = str(args.max_batch)
    if args.max_wait_ms is not None:
        inferencer_env["FRAMEBUS_MAX_WAIT_MS"] = f"{args.max_wait_ms:g}"

    machine = print_header()
    print(
        f"model: near_free_model ({SIZE}x{SIZE}, YOLOv8 head, no detections); cameras: generated "
        f"{VIDEO_W}x{VIDEO_H} H.264 {VIDEO_FPS} fps, looped; inferencer "
        f"max_batch {args.max_batch or 'default'}, max_wait_ms {args.max_wait_ms or 'default'}; "
        f"{args.runs} runs x {args.seconds:g} s per variant after {args.warmup_s:g} s warm-up (left out)",
        flush=True,
    )
    per_variant: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Workdir(Path(tmp), kafka, max(args.capacity_cameras, args.max_cameras))
        for r in range(args.runs):
            cap = capacity(work, args, inferencer_env)
            target = cap * args.load_fraction
            cameras = max(1, min(args.max_cameras, round(target / args.fps)))
            fps = min(VIDEO_FPS, target / cameras)
            print(
                f"run {r + 1}: capacity {cap:.1f} frames/s ({args.capacity_cameras} cameras at "
                f"{args.fps:g} fps, not real time); load {cameras} cameras x {fps:.2f} fps = "
                f"{cameras * fps:.1f} frames/s ({cameras * fps / cap:.0%} of capacity)",
                flush=True,
            )
            run: dict[str, Any] = {
                "capacity_fps": cap,
                "cameras": cameras,
                "fps": fps,
                "variants": {},
            }
            # Each run starts one variant later, so a slow stretch of a shared machine does not
            # always land on the same variant.
            for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
                res = latency(work, args, v, cameras, fps, inferencer_env)
                per_variant[v.name].append(res)
                run["variants"][v.name] = res
                ms = res["ms"]
                print(
                    f"  {v.name:<26} records {res['records']:5d}  "
                    + "  ".join(f"{m} {ms[m]['p50']:.1f}/{ms[m]['p99']:.1f}" for m in METRICS)
                    + f"  {res['statuses']}",
                    flush=True,
                )
            runs.append(run)
    print(f"medians of {args.runs} runs, ms (p50 / p99 of each run, then the median):")
    medians = print_table(per_variant)
    for name, med in medians.items():
        print(f"{name}: {fixed_verdict(med['fixed'])}")
    if args.json is not None:
        doc = {"command": sys.argv, "machine": machine, "runs": runs, "medians": medians}
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
