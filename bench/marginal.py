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
import math
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import onnx

from bench.benchkit import (
    SIZE,
    add_bootstrap_argument,
    bare_consume_process,
    bare_consume_processes,
    broker_pids,
    delete_topics,
    fill_frames,
    fresh_topics,
    host_usage,
    inferencer_env,
    parser_for,
    print_header,
    read_detections,
    run_inferencer,
    split_shares,
    usage_between,
    verdict,
)
from framebus.codec import DetectionsCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus, PixelFormat
from framebus.topology import TopicSettings
from framebus_inferencer.settings import CandidateSelection, InferencerSettings
from testkit.models import near_free_model

GOAL_RATIO = 0.6  # framebus's own CPU a frame / the bare consumer's
GOAL_MS = 0.25  # framebus's own CPU a frame, ms: >= 4,000 frames/s per core of framebus work
GOAL_WORKERS = 1.0  # N workers' own CPU a frame together / one process's
GOAL_BROKER = 0.6  # the broker's CPU a frame during the drain / during an RGB drain
EXIT_LINE = "CPU seconds at exit"  # the inferencer's last log line (framebus_inferencer.service)
RGB = "rgb"  # today's records, what the bare consumer always reads

# Fills a topic with `frames` records of one frame format, round-robin over `cameras`.
Filler = Callable[[KafkaSettings, str, int, int], None]
# Records byte for byte as the decoder writes them in each frame format.
FILLERS: dict[str, Filler] = {
    RGB: fill_frames,
    PixelFormat.I420.value: functools.partial(fill_frames, pixel_format=PixelFormat.I420),
}


def frame_formats() -> tuple[str, ...]:
    """The values of the inferencer's `frame_format` setting; (rgb,) where it has none."""
    fields = {f.name: f for f in dataclasses.fields(InferencerSettings)}
    if "frame_format" not in fields:
        return (RGB,)
    default: Any = fields["frame_format"].default  # an enum member: its class lists the formats
    return tuple(member.value for member in type(default))


def filler(frame_format: str) -> Filler:
    """The filler of `frame_format`'s records, or an error that says where to add it."""
    if frame_format not in FILLERS:
        raise SystemExit(
            f"--frame-format {frame_format}: bench.marginal cannot write {frame_format} records "
            "yet; add a filler to FILLERS in bench/marginal.py"
        )
    return FILLERS[frame_format]


@dataclass(frozen=True)
class Life:
    """One process draining one topic, from its start to its exit."""

    frames: int
    cpu_s: float  # the process's whole CPU
    engine_s: float  # of which inside the engine's run calls (0 for the bare consumer)
    broker_s: float  # the local broker's CPU over the process's life
    window_cpu_s: float  # its CPU between its first and last batch (bench.capacity's window)
    window_frames: int  # the frames after the first batch
    before_s: float  # its CPU before the first batch's records (nan: not sampled)
    wall_s: float = float("nan")  # from its start to its exit


def children_cpu_s() -> float:
    """User + system CPU of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bare_life(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    batch: int,
    stage: bool = False,
    relay: str | None = None,
) -> Life:
    """A well-configured bare consumer (16 MiB fetches, heap kept) reading the topic, in a process.

    `stage`: it also copies each record into a row of a batch buffer; `relay`: it also answers
    each record with a detections record on that topic (`bare_consume`).
    """
    brokers = broker_pids(kafka.bootstrap_servers)
    cpu0, (_, broker0), wall0 = children_cpu_s(), host_usage(brokers), time.monotonic()
    got = bare_consume_process(
        kafka, topic, frames, batch, keep_heap=True, stage=stage, relay=relay
    )
    cpu1, (_, broker1), wall = children_cpu_s(), host_usage(brokers), time.monotonic() - wall0
    nan = float("nan")
    return Life(frames, cpu1 - cpu0, 0.0, broker1 - broker0, got.cpu_s, got.frames, nan, wall)


def relays_life(
    kafka: KafkaSettings, topic: str, frames: int, batch: int, relay: str, n: int
) -> Life:
    """`n` relay consumers at once, each in its own process on its share of the partitions.

    The floor of `--workers n`: what these libraries cost `n` processes splitting the frames
    (each its own clients, threads, fetches and produce requests), without a group's rebalances.
    """
    brokers = broker_pids(kafka.bootstrap_servers)
    shares = split_shares(kafka, topic, n)
    if sum(share for _, share in shares) != frames:
        raise RuntimeError(f"{topic}: {shares} is not {frames} records")
    cpu0, (_, broker0), wall0 = children_cpu_s(), host_usage(brokers), time.monotonic()
    got = bare_consume_processes(kafka, topic, shares, batch, keep_heap=True, relay=relay)
    cpu1, (_, broker1), wall = children_cpu_s(), host_usage(brokers), time.monotonic() - wall0
    nan = float("nan")
    window_cpu_s, window_frames = sum(g.cpu_s for g in got), sum(g.frames for g in got)
    return Life(frames, cpu1 - cpu0, 0.0, broker1 - broker0, window_cpu_s, window_frames, nan, wall)


def engine_cpu_at_exit(log_path: Path) -> float:
    """The engine's CPU seconds from the inferencer's exit lines (one a worker process)."""
    lines = [
        json.loads(line)
        for line in log_path.read_text(errors="replace").splitlines()
        if EXIT_LINE in line
    ]
    if not lines:
        raise RuntimeError(f"no '{EXIT_LINE}' line in {log_path}")
    return sum(float(line.get("engine_cpu_s", 0.0)) for line in lines)


def framebus_life(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    args: argparse.Namespace,
    frames: int,
    workers: int = 1,
) -> Life:
    """`framebus inferencer` draining the topic until it stops on idle; its detections checked.

    `workers` > 1: as `--workers N`, the supervisor and its workers (their CPU is the reaped
    supervisor's children's, their engine CPU the sum of each worker's exit line).
    """
    log_path = Path(args.workdir) / f"inferencer-{names.detections_topic}.log"
    env = {**inferencer_env(kafka, names, model, args.max_batch), "FRAMEBUS_LOG_LEVEL": "info"}
    if workers > 1:
        env["FRAMEBUS_WORKERS"] = str(workers)
    if len(frame_formats()) > 1:  # the inferencer has the setting: the graph takes these records
        env["FRAMEBUS_FRAME_FORMAT"] = args.frame_format
    env["FRAMEBUS_CANDIDATE_SELECTION"] = args.candidate_selection
    brokers = broker_pids(kafka.bootstrap_servers)
    cpu0, (_, broker0), wall0 = children_cpu_s(), host_usage(brokers), time.monotonic()
    code, samples = run_inferencer(env, log_path)
    cpu1, (_, broker1), wall = children_cpu_s(), host_usage(brokers), time.monotonic() - wall0
    if code:
        raise RuntimeError(f"inferencer exit code {code}; log {log_path}:\n{log_path.read_text()}")
    codec = DetectionsCodec()
    dets = sorted(
        (
            (m.timestamp()[1], codec.decode(m.value() or b""))
            for m in read_detections(kafka, names.detections_topic, frames)
        ),
        key=lambda timed: timed[0],  # a batch's records share a timestamp
    )
    statuses = Counter(d.status for _, d in dets)
    if (
        statuses != {FrameStatus.INFERRED: frames}
        or len({(d.camera_id, d.seq) for _, d in dets}) != frames
    ):
        # The log goes with the run's temporary directory: its tail is the evidence.
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-60:])
        raise RuntimeError(f"{frames} frames: detections {dict(statuses)}; log {log_path}:\n{tail}")
    # As bench.capacity: the first batch's records end the start-up; later records are frames.
    first_ms, last_ms = dets[0][0], dets[-1][0]
    window_cpu_s = usage_between(samples, first_ms / 1000, last_ms / 1000)[0]
    before_s = usage_between(samples, samples[0][0], first_ms / 1000)[0] + samples[0][1]
    return Life(
        frames,
        cpu1 - cpu0,
        engine_cpu_at_exit(log_path),
        broker1 - broker0,
        window_cpu_s,
        frames - max(1, dets[0][1].batch_size),
        before_s,
        wall,
    )


IDLE_WINDOW_S = 3.0  # the broker's CPU read with nothing else running, once a run


def broker_idle_ms_per_s(kafka: KafkaSettings) -> float:
    """The local broker's CPU over IDLE_WINDOW_S with no client running: ms a second."""
    brokers = broker_pids(kafka.bootstrap_servers)
    before = host_usage(brokers)[1]
    time.sleep(IDLE_WINDOW_S)
    return (host_usage(brokers)[1] - before) * 1000 / IDLE_WINDOW_S


@dataclass(frozen=True)
class RunFigures:
    """One run's marginal figures, ms of CPU a frame."""

    framebus_own: float  # the inferencer process less its engine
    framebus_whole: float  # the inferencer process
    engine: float  # inside the engine's run calls
    bare: float  # the bare consumer process
    broker_framebus: float  # the broker while framebus drained
    broker_bare: float  # the broker while the bare consumer read
    window_framebus: float  # bench.capacity's window figure of the large drain, whole process
    window_bare: float  # the same for the bare consumer
    # The bare consumer of framebus's own records (its frame format): what librdkafka and
    # confluent-kafka alone cost for those bytes, the floor under framebus's receive path.
    floor: float
    # The same consumer also copying each record into a batch buffer's row: the floor of any
    # consumer that hands a batched model its frames (one contiguous input, one copy a frame).
    staged_floor: float
    broker_floor: float  # the broker while the floor consumer read: fetching those records
    # The staging consumer also answering each record with a detections record (decode its head,
    # encode, produce, flush and commit a batch): what every such service pays these libraries.
    relay_floor: float
    broker_relay: float  # the broker meanwhile
    # With --workers N: `framebus inferencer --workers N` draining the same frames (nan without)
    workers_own: float = float("nan")
    workers_whole: float = float("nan")
    # and N relay processes, each on its share of the partitions: the floor of N workers
    relays_floor: float = float("nan")
    # Wall time a frame, marginal, of framebus's drain and the relay's (ms), and the broker's
    # idle CPU (ms a second): what the longer drain alone costs the broker.
    wall_framebus: float = float("nan")
    wall_relay: float = float("nan")
    broker_idle: float = float("nan")


def per_frame_ms(small: float, large: float, frames: tuple[int, int]) -> float:
    """(large - small) / (frames large - frames small), in ms."""
    return (large - small) * 1000 / (frames[1] - frames[0])


def figures(
    fb: tuple[Life, Life],
    bare: tuple[Life, Life],
    floor: tuple[Life, Life],
    staged: tuple[Life, Life],
    relay: tuple[Life, Life],
    workers: tuple[Life, Life] | None = None,
    relays: tuple[Life, Life] | None = None,
    broker_idle: float = float("nan"),
) -> RunFigures:
    """The marginal figures of one run from its processes (small, large)."""
    n = (fb[0].frames, fb[1].frames)
    by_workers: dict[str, float] = {}
    if workers is not None and relays is not None:
        by_workers = {
            "relays_floor": per_frame_ms(relays[0].cpu_s, relays[1].cpu_s, n),
            "workers_own": per_frame_ms(
                workers[0].cpu_s - workers[0].engine_s, workers[1].cpu_s - workers[1].engine_s, n
            ),
            "workers_whole": per_frame_ms(workers[0].cpu_s, workers[1].cpu_s, n),
        }
    return RunFigures(
        **by_workers,
        broker_idle=broker_idle,
        framebus_own=per_frame_ms(fb[0].cpu_s - fb[0].engine_s, fb[1].cpu_s - fb[1].engine_s, n),
        framebus_whole=per_frame_ms(fb[0].cpu_s, fb[1].cpu_s, n),
        engine=per_frame_ms(fb[0].engine_s, fb[1].engine_s, n),
        bare=per_frame_ms(bare[0].cpu_s, bare[1].cpu_s, n),
        broker_framebus=per_frame_ms(fb[0].broker_s, fb[1].broker_s, n),
        broker_bare=per_frame_ms(bare[0].broker_s, bare[1].broker_s, n),
        window_framebus=fb[1].window_cpu_s * 1000 / fb[1].window_frames,
        window_bare=bare[1].window_cpu_s * 1000 / bare[1].window_frames,
        floor=per_frame_ms(floor[0].cpu_s, floor[1].cpu_s, n),
        staged_floor=per_frame_ms(staged[0].cpu_s, staged[1].cpu_s, n),
        broker_floor=per_frame_ms(floor[0].broker_s, floor[1].broker_s, n),
        relay_floor=per_frame_ms(relay[0].cpu_s, relay[1].cpu_s, n),
        broker_relay=per_frame_ms(relay[0].broker_s, relay[1].broker_s, n),
        wall_framebus=per_frame_ms(fb[0].wall_s, fb[1].wall_s, n),
        wall_relay=per_frame_ms(relay[0].wall_s, relay[1].wall_s, n),
    )


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


COLUMNS = (
    ("framebus_own", "fb own"),
    ("framebus_whole", "fb whole"),
    ("engine", "engine"),
    ("bare", "bare"),
    ("broker_framebus", "broker fb"),
    ("broker_bare", "broker bare"),
    ("window_framebus", "window fb"),
    ("window_bare", "window bare"),
    ("floor", "bare fb-fmt"),
    ("staged_floor", "+ staging"),
    ("broker_floor", "broker fb-fmt"),
    ("relay_floor", "+ relay"),
    ("broker_relay", "broker rel"),
    ("workers_own", "N wk own"),
    ("workers_whole", "N wk whole"),
    ("relays_floor", "N relays"),
    ("wall_framebus", "wall fb"),
    ("wall_relay", "wall relay"),
    ("broker_idle", "broker idle"),
)


def row(label: str, values: dict[str, float]) -> str:
    """One line of the table: the run's label and each column's figure."""
    return f"{label:>6} " + " ".join(f"{values[key]:>11.3f}" for key, _ in COLUMNS)


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


# framebus's figure, the bare consumer's of the same run, and what the line calls their ratio
RATIOS = (
    ("framebus_own", "bare", "framebus's own (outside the engine) / the bare consumer"),
    ("framebus_whole", "bare", "the whole framebus process / the bare consumer"),
    ("broker_framebus", "broker_bare", "the broker during framebus's drain / during the bare one"),
    ("window_framebus", "window_bare", "bench.capacity's window figures, framebus / bare"),
)


def median_ratio(runs: list[RunFigures], subject: str, base: str) -> tuple[float, list[float]]:
    """The median of the per-run ratios subject / base, and those ratios."""
    per_run = [getattr(r, subject) / getattr(r, base) for r in runs]
    return statistics.median(per_run), per_run


def reach(value: float, limit: float) -> str:
    """Whether a floor leaves a goal reachable."""
    return "below, reachable" if value <= limit else "above, capped by the libraries"


def report(runs: list[RunFigures]) -> dict[str, float]:
    """Print the medians, the ratios to the bare consumer and the goals; return the medians."""
    medians = {key: statistics.median(getattr(r, key) for r in runs) for key, _ in COLUMNS}
    print(row("median", medians))
    print(f"\nratios to the bare consumer, median of the per-run ratios ({len(runs)} runs):")
    for subject, base, title in RATIOS:
        ratio, per_run = median_ratio(runs, subject, base)
        medians[f"{subject}/{base}"] = ratio
        print(f"  {title}: {ratio:.2f} (runs {', '.join(f'{r:.2f}' for r in per_run)})")
    own, ratio = medians["framebus_own"], medians["framebus_own/bare"]
    print(
        f"\nframebus's own CPU a frame (outside the engine's run calls): {own:.3f} ms "
        f"({verdict(own, GOAL_MS, at_most=True)}), {ratio:.2f} x the bare consumer's "
        f"{medians['bare']:.3f} ms ({verdict(ratio, GOAL_RATIO, at_most=True)}); the whole process "
        f"{medians['framebus_whole']:.3f} ms ({medians['engine']:.3f} in the engine); the broker "
        f"{medians['broker_framebus']:.3f} ms a frame during framebus's drains, "
        f"{medians['broker_bare']:.3f} during the bare consumer's"
    )
    floor = medians["floor"]
    print(
        f"the floor under framebus's receive path: a bare consumer of framebus's own records "
        f"{floor:.3f} ms a frame (librdkafka and confluent-kafka alone); framebus's own less "
        f"that floor {own - floor:.3f} ms"
    )
    ratio_ms = GOAL_RATIO * medians["bare"]
    floors = (
        (
            "staged_floor",
            "the floor with the batch input's copy (each record also copied into a row of a "
            "batch buffer)",
        ),
        (
            "relay_floor",
            "the floor of any service answering each frame with one record (also decoding its "
            "head and producing a detections record; a batch flushed, then committed)",
        ),
    )
    for key, what in floors:
        value = medians[key]
        print(
            f"{what}: {value:.3f} ms a frame; against {GOAL_MS} ms: "
            f"{reach(value, GOAL_MS)}; against {GOAL_RATIO} x the bare consumer, "
            f"{ratio_ms:.3f} ms: {reach(value, ratio_ms)}; framebus's own less it "
            f"{own - value:.3f} ms"
        )
    fetch_fb, fetch_rgb = medians["broker_floor"], medians["broker_bare"]
    drain = medians["broker_framebus"]
    rgb_drain = drain - fetch_fb + fetch_rgb  # the same requests, RGB records fetched
    least = medians["broker_relay"]
    least_rgb = least - fetch_fb + fetch_rgb
    print(
        f"the broker, ms a frame: fetching framebus's records {fetch_fb:.3f}, RGB records "
        f"{fetch_rgb:.3f}; framebus's drain {drain:.3f}, so about {rgb_drain:.3f} with RGB records "
        f"(the same requests): {drain / rgb_drain:.2f} x; the relay (the least these clients ask "
        f"of it: one produce request per partition of a batch, librdkafka's way, and a commit) "
        f"{least:.3f}, {least_rgb:.3f} with RGB records: {least / least_rgb:.2f} x, "
        f"{reach(least / least_rgb, GOAL_BROKER)} for the goal <= {GOAL_BROKER} x"
    )
    longer_ms = medians["wall_framebus"] - medians["wall_relay"]
    idle_share = medians["broker_idle"] * longer_ms / 1000
    print(
        f"framebus's drain takes {longer_ms:.3f} ms a frame longer than the relay's; at the "
        f"broker's idle {medians['broker_idle']:.1f} ms of CPU a second that is {idle_share:.3f} "
        f"ms a frame of the {drain - least:.3f} framebus asks of the broker above the relay"
    )
    if not math.isnan(medians["workers_own"]):
        ratio, per_run = median_ratio(runs, "workers_own", "framebus_own")
        whole, _ = median_ratio(runs, "workers_whole", "framebus_whole")
        print(
            f"--workers: framebus's own CPU a frame, all the workers and the "
            f"supervisor together, {medians['workers_own']:.3f} ms against one process's "
            f"{own:.3f}: {ratio:.2f} x (runs {', '.join(f'{r:.2f}' for r in per_run)}; "
            f"{verdict(ratio, GOAL_WORKERS, at_most=True)}); the whole processes {whole:.2f} x"
        )
        relays, per_run = median_ratio(runs, "relays_floor", "relay_floor")
        print(
            f"the floor of --workers: as many relay processes, each on its share of the "
            f"partitions, {medians['relays_floor']:.3f} ms a frame together against one relay's "
            f"{medians['relay_floor']:.3f}: {relays:.2f} x (runs "
            f"{', '.join(f'{r:.2f}' for r in per_run)}); against the goal <= {GOAL_WORKERS} x: "
            f"{reach(relays, GOAL_WORKERS)}"
        )
    if any(getattr(r, key) <= 0 for r in runs for key in ("framebus_own", "bare")):
        print(
            "a run's marginal figure is not above zero: the processes' fixed costs varied by more "
            "than the extra frames cost; give --large more frames (the ratios are not meaningful)"
        )
    return medians


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
