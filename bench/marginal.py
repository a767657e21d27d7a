"""Marginal CPU per frame: `framebus inferencer`'s own (outside the engine), a bare consumer's, the broker's.

Each run fills two fresh topics, a small and a large one (--small, --large frame records of
--cameras cameras, 640x640 RGB, 1.23 MB each). Each topic is drained by a bare consumer (the
inferencer's consumer settings: 16 MiB fetches, read_committed; glibc keeping freed memory; in a
fresh process) and by `framebus inferencer` (near-free engine, max_batch 16), each process from its
start to its exit. Per process: its whole CPU (getrusage of the reaped child), the local broker's
CPU over its life, and, for the inferencer, the CPU its threads spent inside the engine's run calls
(`framebus_inferencer_engine_cpu_seconds`, logged at exit). The marginal cost per frame is

    (CPU draining the large topic - CPU draining the small one) / (large - small),

so start-up, warm-up, group join, the idle tail and exit cancel out. framebus's own figure is the
process's CPU less the engine's (on a GPU, the engine's CPU is the device's work). Beside it: the
whole process's, the bare consumer's, and the broker's during each. For comparison, each large
drain's window figure as `bench.capacity` measures it (CPU between the first and the last batch,
over the frames after the first batch).

Each figure of framebus's is also given against the bare consumer's of the same run (run by run,
and the median of those ratios), and every figure is a median over the counted runs.

--frame-format: the records framebus drains, one of the inferencer's `frame_format` setting's values
(only rgb where the inferencer has no such setting, as before I420). The bare consumer always reads
RGB records, as the goal says; with rgb both drain the same topics.

A bare consumer of framebus's own records (column `bare fb-fmt`, the same as `bare` for rgb) is
the floor under framebus's receive path: what librdkafka and confluent-kafka alone spend on those
bytes. The same consumer copying each record into a row of a batch buffer (`+ staging`) is the
floor of any consumer that feeds a batched model on these libraries: confluent-kafka hands each
value over as its own `bytes`, and the model takes one contiguous input, so one copy a frame is
the least. That consumer also answering each record with a detections record (`+ relay`:
decode its head, encode and produce the answer keyed by camera, a batch flushed, then
committed) is the floor of any service that answers each frame with one record on these
libraries. The broker while the floor consumer reads (`broker fb-fmt`) is its cost of fetching
those records; while the relay runs (`broker rel`), the least these clients ask of it. A goal
below a floor is capped by the libraries. --candidate-selection (default topk, what `auto`
picks on a GPU) leaves the host what it does at GPU speed.

--workers N (N > 1): `framebus inferencer --workers N` also drains the same frames (its answers
on topics of their own); its CPU a frame, every worker and the supervisor together, against the
single process's. Its floor (`N relays`): N relay consumers at once, each in its own process on its
share of the partitions (assigned: no group, no rebalances), against the one relay.

Each run also reads the broker's CPU over a few quiet seconds (`broker idle`, ms a second) and
each drain's wall time: framebus's longer drain times that idle rate is what the broker spends
on framebus merely for being up longer.

Goals (issue 41): framebus's own <= 0.6 x the bare consumer's, and <= 0.25 ms a frame; the
broker's during an I420 drain <= 0.6 x an RGB drain's; N workers' own <= 1.0 x one process's.

    .venv/bin/python -m bench.marginal [--small 320] [--large 1920] [--runs 5] [--warm-up 1]
        [--cameras 16] [--max-batch 16] [--frame-format rgb] [--workers 1]
        [--bootstrap 127.0.0.1:29092] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import onnx

from bench.benchkit import (
    SIZE,
    add_bootstrap_argument,
    delete_topics,
    fill_frames,
    fresh_topics,
    parser_for,
    print_header,
)
from bench.marginal_figures import COLUMNS, RunFigures, figures, row
from bench.marginal_lives import (
    RGB,
    Life,
    bare_life,
    broker_idle_ms_per_s,
    frame_formats,
    framebus_life,
    relays_life,
)
from bench.marginal_report import report
from framebus.kafka.settings import KafkaSettings
from framebus.messages import PixelFormat
from framebus_inferencer.settings import CandidateSelection
from testkit.models import near_free_model

# Fills a topic with `frames` records of one frame format, round-robin over `cameras`.
Filler = Callable[[KafkaSettings, str, int, int], None]
# Records byte for byte as the decoder writes them in each frame format.
FILLERS: dict[str, Filler] = {
    RGB: fill_frames,
    PixelFormat.I420.value: functools.partial(fill_frames, pixel_format=PixelFormat.I420),
}


def filler(frame_format: str) -> Filler:
    """The filler of `frame_format`'s records, or an error that says where to add it."""
    if frame_format not in FILLERS:
        raise SystemExit(
            f"--frame-format {frame_format}: bench.marginal cannot write {frame_format} records "
            "yet; add a filler to FILLERS in bench/marginal.py"
        )
    return FILLERS[frame_format]


def one_run(
    args: argparse.Namespace, kafka: KafkaSettings, model: Path, large_first: bool
) -> tuple[RunFigures, list[Life]]:
    """Fill both topics; drain each with the bare consumer and framebus (sizes in turn)."""
    sizes = [args.small, args.large]
    fb_topics = [fresh_topics(kafka, args.partitions, prefix="marg") for _ in sizes]
    relay_topics = [fresh_topics(kafka, args.partitions, prefix="relay") for _ in sizes]
    worker_topics = [
        fresh_topics(kafka, args.partitions, prefix="workers") for _ in sizes if args.workers > 1
    ]
    relays_topics = [
        fresh_topics(kafka, args.partitions, prefix="relays") for _ in sizes if args.workers > 1
    ]
    bare_topics = fb_topics
    if args.frame_format != RGB:
        bare_topics = [fresh_topics(kafka, args.partitions, prefix="marg") for _ in sizes]
    lives: dict[tuple[str, int], Life] = {}
    try:
        for fb_names, bare_names, n in zip(fb_topics, bare_topics, sizes, strict=True):
            filler(args.frame_format)(kafka, fb_names.frames_topic, n, args.cameras)
            if bare_names is not fb_names:
                fill_frames(kafka, bare_names.frames_topic, n, args.cameras)
        os.sync()  # the fills' gigabytes written back now, not inside a drain
        idle = broker_idle_ms_per_s(kafka)
        order = [1, 0] if large_first else [0, 1]
        for i in order:
            n = sizes[i]
            lives["bare", i] = bare_life(kafka, bare_topics[i].frames_topic, n, args.max_batch)
            if bare_topics is not fb_topics:
                floor_life = bare_life(kafka, fb_topics[i].frames_topic, n, args.max_batch)
                lives["floor", i] = floor_life
            topic = fb_topics[i].frames_topic
            lives["staged", i] = bare_life(kafka, topic, n, args.max_batch, stage=True)
            answers = relay_topics[i].detections_topic
            lives["relay", i] = bare_life(kafka, topic, n, args.max_batch, relay=answers)
            lives["framebus", i] = framebus_life(kafka, fb_topics[i], model, args, n)
            if args.workers > 1:  # the same frames, its answers on a topic of their own
                outputs = worker_topics[i]
                again = dataclasses.replace(
                    fb_topics[i],
                    detections_topic=outputs.detections_topic,
                    deadletter_topic=outputs.deadletter_topic,
                )
                lives["workers", i] = framebus_life(kafka, again, model, args, n, args.workers)
                answers = relays_topics[i].detections_topic
                lives["relays", i] = relays_life(
                    kafka, topic, n, args.max_batch, answers, args.workers
                )
    finally:
        every = [*fb_topics, *bare_topics, *relay_topics, *worker_topics, *relays_topics]
        for names in {id(t): t for t in every}.values():
            delete_topics(kafka, names)
    fb = (lives["framebus", 0], lives["framebus", 1])
    bare = (lives["bare", 0], lives["bare", 1])
    floor = (lives.get(("floor", 0), bare[0]), lives.get(("floor", 1), bare[1]))
    staged = (lives["staged", 0], lives["staged", 1])
    relay = (lives["relay", 0], lives["relay", 1])
    workers = relays = None
    if args.workers > 1:
        workers = (lives["workers", 0], lives["workers", 1])
        relays = (lives["relays", 0], lives["relays", 1])
    got = figures(fb, bare, floor, staged, relay, workers, relays, idle)
    return got, [*fb, *bare, *floor, *staged, *relay, *(workers or ()), *(relays or ())]


def parse_args() -> argparse.Namespace:
    parser = parser_for(__doc__)
    parser.add_argument("--small", type=int, default=320, help="frames on the small topic")
    parser.add_argument("--large", type=int, default=1920, help="frames on the large topic")
    parser.add_argument("--cameras", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument(
        "--frame-format",
        default=RGB,
        choices=frame_formats(),
        help="the records framebus drains (the inferencer's frame_format); the bare consumer's "
        "are RGB",
    )
    parser.add_argument(
        "--candidate-selection",
        default=CandidateSelection.TOPK.value,
        help="the inferencer's candidate_selection; topk (the default here) is what `auto` "
        "picks on a GPU provider, so the host is left what it does at GPU speed",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="N > 1: also drain the same frames with `framebus inferencer --workers N` and "
        "compare its CPU a frame (every worker and the supervisor) with the single process's",
    )
    parser.add_argument("--runs", type=int, default=5, help="counted runs (medians)")
    parser.add_argument("--warm-up", type=int, default=1, help="runs first, not counted")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    add_bootstrap_argument(parser)
    args = parser.parse_args()
    if args.large <= args.small:
        parser.error("--large must be more frames than --small")
    parser_choices = [c.value for c in CandidateSelection]
    if args.candidate_selection not in parser_choices:
        parser.error(f"--candidate-selection: one of {parser_choices}")
    filler(args.frame_format)  # fails now, not after the first fills
    return args


def measure(
    args: argparse.Namespace, kafka: KafkaSettings
) -> tuple[list[RunFigures], list[list[dict[str, Any]]]]:
    """The warm-up and counted runs, each printed as a row; the counted ones and their processes."""
    print(
        f"\n{args.small} -> {args.large} frames of {args.cameras} cameras, {args.partitions} "
        f"partitions, max_batch {args.max_batch}, near-free engine, candidate selection "
        f"{args.candidate_selection}; framebus drains "
        f"{args.frame_format} records, the bare consumer {RGB}; ms of CPU a frame, marginal "
        "(window: bench.capacity's figure of the large drain)"
    )
    print(f"{'run':>6} " + " ".join(f"{title:>11}" for _, title in COLUMNS), flush=True)
    runs: list[RunFigures] = []
    lives: list[list[dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as workdir:
        args.workdir = workdir
        model = Path(workdir) / "near-free-640.onnx"
        onnx.save(near_free_model(SIZE), str(model))
        for run in range(-args.warm_up, args.runs):
            got, four = one_run(args, kafka, model, large_first=run % 2 == 1)
            label = f"w{run + args.warm_up + 1}" if run < 0 else str(run + 1)
            note = "  warm-up, not counted" if run < 0 else ""
            print(row(label, asdict(got)) + note, flush=True)
            if run >= 0:
                runs.append(got)
                lives.append([asdict(life) for life in four])
    return runs, lives


def main() -> int:
    args = parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    machine = print_header()
    runs, lives = measure(args, kafka)
    medians = report(runs)
    if args.json:
        out: dict[str, Any] = {"command": sys.argv, "machine": machine, "args": vars(args)}
        out |= {"runs": [asdict(r) for r in runs], "medians": medians, "processes": lives}
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
