"""Capacity at GPU speed: framebus's own cost against bare Kafka clients, with a near-free engine.

With an engine that costs almost nothing (`near_free_model`: a 640x640 input, one pixel read, an
all-zero YOLOv8 head), what is left of a pipeline's time is framebus itself, which is what bounds
a replica in front of a fast GPU. Two sides, each against a baseline measured in the same run:

- inferencer: a fresh topic filled with N frame records from C cameras. Baseline: a bare
  confluent_kafka.Consumer with the inferencer's consumer settings and heap policy, in a fresh
  process, reading them from the beginning (bytes only), before and after the drain (their mean).
  Subject: `framebus inferencer` (a subprocess) draining the same topic: decode, batch, infer,
  postprocess, publish, commit. Both count from their first delivery to their last, the first
  delivery's records left out (start-up, warm-up, group join). Also per run: each process's CPU
  and minor page faults per frame, the drain's mean batch and longest gap between batches, and
  what else ran (the local broker's and the rest of the host's CPU, in cores).
- decoder: the decoder's publishing path in-process from pre-decoded 1080p frames (C camera
  threads: letterbox, FramePublisher, the project's Producer) against a bare
  confluent_kafka.Producer sending the same record bytes, the two taking turns in short rounds;
  per side, its CPU a frame (this process's, every thread, over its rounds) and the broker's.

- workers (`--workers N`, N > 1, instead of the inferencer side's bare consumer): `framebus
  inferencer` as one process and as a supervisor of N worker processes, taking turns (in
  alternating order) on fresh topics of the same frames; each is ready (every worker a member
  of the group, holding partitions) before the frames are produced, and drains them as they
  come. Per drain: the CPU and page faults of the whole process tree per frame, over the same
  window as above.

Each side first does --warm-up runs that are printed but not counted: a freshly started broker's
JIT compiler takes a share of a 2-core host through its first drains, which the CPU-bound
framebus side pays and the baseline does not.

Goal: framebus / baseline >= 0.80 on each side (median of the per-run ratios); workers: N
workers' CPU per frame together / one process's <= 1.00.

    .venv/bin/python -m bench.capacity [--frames 960] [--cameras 16] [--runs 3] [--warm-up 2]
        [--max-batch 16] [--side inferencer|decoder|both] [--workers 1]
        [--bootstrap 127.0.0.1:29092]
        [--json out.json] [--profile prof.txt]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.benchkit import (
    add_bootstrap_argument,
    parser_for,
    print_header,
)
from bench.capacity_decoder import decoder_side
from bench.capacity_inferencer import inferencer_side
from bench.capacity_report import Side, summary
from bench.capacity_workers import workers_side, workers_summary
from framebus.kafka.settings import KafkaSettings
from framebus.pixels import FrameFormat

WARM_UP_RUNS = 2  # uncounted runs first: a fresh broker JIT-compiles through its first drains


def parse_args() -> argparse.Namespace:
    parser = parser_for(__doc__)
    parser.add_argument("--frames", type=int, default=960, help="frame records per run")
    parser.add_argument("--cameras", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3, help="counted runs per side (median)")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=WARM_UP_RUNS,
        help="runs of each side before the counted ones, printed but not counted (the broker's "
        "JIT compiles the paths they use)",
    )
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=4, help="decoder side: alternating rounds per run"
    )
    parser.add_argument("--partitions", type=int, default=16, help="of each fresh frames topic")
    parser.add_argument(
        "--frame-format",
        default=FrameFormat.RGB.value,
        choices=[f.value for f in FrameFormat],
        help="decoder side: the records framebus publishes; i420 also runs rgb in each round",
    )
    add_bootstrap_argument(parser)
    parser.add_argument("--side", choices=("inferencer", "decoder", "both"), default="both")
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=20.0,
        help="--workers: the inferencers' max_wait_ms (the service's default 20; a longer wait "
        "fills every batch, as when the host is the limit, the case workers are for)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="above 1, the inferencer side compares one process with `--workers N` (CPU per "
        "frame of the whole process tree, the two taking turns) instead of the bare consumer",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="after the runs, one more drain under `py-spy record --format raw` to this file",
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    machine = print_header()
    results: dict[str, Any] = {"command": sys.argv, "machine": machine, "args": vars(args)}
    sides: dict[str, tuple[str, Side]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.side in ("inferencer", "both") and args.workers > 1:
            results["workers"] = workers_summary(workers_side(args, kafka, Path(tmp)))
        elif args.side in ("inferencer", "both"):
            sides["inferencer"] = ("bare consumer", inferencer_side(args, kafka, Path(tmp)))
        if args.side in ("decoder", "both"):
            sides["decoder"] = ("bare producer", decoder_side(args, kafka))
    print()
    for name, (base_name, side) in sides.items():
        results[name] = summary(name, base_name, side)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
