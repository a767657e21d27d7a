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
import contextlib
import itertools
import json
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import confluent_kafka
import cv2
import numpy as np
import onnx
from confluent_kafka.admin import AdminClient

from bench.benchkit import (
    CPU_SAMPLE_S,
    SIZE,
    SOURCE,
    Consumed,
    UsageSamples,
    add_bootstrap_argument,
    bare_consume_process,
    broker_pids,
    delete_topics,
    encode_frame,
    fill_frames,
    fresh_topics,
    host_usage,
    inferencer_env,
    others_cores,
    parser_for,
    print_header,
    print_median_ratio,
    process_tree_usage,
    ratios,
    read_detections,
    run_inferencer,
    usage_between,
)
from framebus.codec import DetectionsCodec
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Compression, FrameStatus
from framebus.pixels import FrameFormat
from framebus.topology import TopicSettings
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.publisher import FramePublisher, PendingFrame
from framebus_decoder.service import producer_overrides
from framebus_decoder.settings import BackpressurePolicy, DecoderSettings
from framebus_decoder.source import letterbox_frame
from framebus_decoder.stats import DecoderStats
from framebus_decoder.wire import FrameEncoder
from framebus_tools.perf.loadtest import end_offsets
from framebus_tools.process import ServiceProcess, free_port
from testkit.models import near_free_model

GOAL = 0.80
DECODER_FORMAT_GOAL = 0.7  # issue 41: the I420 publishing path's CPU a frame / today's RGB's
WORKERS_GOAL = 1.00  # --workers N: their CPU per frame together / one process's, at most
WARM_UP_RUNS = 2  # uncounted runs first: a fresh broker JIT-compiles through its first drains


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


# ---------------------------------------------------------------------------------------------
# Inferencer side


@dataclass(frozen=True)
class Drain:
    """What one `framebus inferencer` drain did, read back from its detections topic."""

    rate: float
    records: int
    by_status: dict[str, int]
    distinct_frames: int
    boxes: int
    exit_code: int
    cpu_ms_per_frame: float  # the inferencer process's, over the rate's window (nan: unknown)
    faults_per_frame: float  # its minor page faults per frame, over the same window
    mean_batch: float  # frames per inference batch, averaged over the frames
    longest_gap_ms: float  # the longest time between two batches' records: a stall, if long
    broker_cores: float  # the local broker's CPU over the rate's window, in cores
    rest_cores: float  # the host's other busy CPU (neither the inferencer nor the broker)

    def note(self, frames: int) -> str:
        """'' when every frame has exactly one INFERRED record and no box, else what is wrong."""
        problems = []
        if self.exit_code:
            problems.append(f"inferencer exit code {self.exit_code}")
        if self.by_status.get(FrameStatus.INFERRED.value, 0) != frames:
            problems.append(f"statuses {self.by_status} for {frames} frames")
        if self.distinct_frames != frames or self.records != frames:
            problems.append(f"{self.records} records for {self.distinct_frames} distinct frames")
        if self.boxes:
            problems.append(f"{self.boxes} boxes from an all-zero head")
        return "; ".join(problems)


def framebus_drain(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    args: argparse.Namespace,
    workdir: Path,
    profile: Path | None = None,
) -> Drain:
    """`framebus inferencer` draining the topic; frames/s from its detections' timestamps."""
    log_path = workdir / f"inferencer-{names.frames_topic}.log"
    env = inferencer_env(kafka, names, model, args.max_batch)
    code, usage = run_inferencer(env, log_path, profile)
    return drain_figures(kafka, names, args, log_path, code, usage)


def drain_figures(
    kafka: KafkaSettings,
    names: TopicSettings,
    args: argparse.Namespace,
    log_path: Path,
    code: int,
    usage: UsageSamples,
) -> Drain:
    """A drain's figures from its detections topic and its CPU samples."""
    codec = DetectionsCodec()
    messages = read_detections(kafka, names.detections_topic, args.frames)
    dets = sorted(
        ((m.timestamp()[1], codec.decode(m.value())) for m in messages), key=lambda d: d[0]
    )
    if not dets:
        raise RuntimeError(f"no detections; inferencer log {log_path}:\n{log_path.read_text()}")
    by_status: dict[str, int] = {}
    for _, d in dets:
        by_status[d.status.value] = by_status.get(d.status.value, 0) + 1
    # CreateTime is set when the publish thread produces a record: the first batch's records
    # mark the end of start-up and of the first batch; each later record is one frame through.
    first_ms, last_ms = dets[0][0], dets[-1][0]
    span_s = max(last_ms - first_ms, 1) / 1000
    counted = len(dets) - max(1, dets[0][1].batch_size)
    cpu_s, faults, host_s, broker_s = usage_between(usage, first_ms / 1000, last_ms / 1000)
    broker_cores, rest_cores = others_cores(host_s, cpu_s, broker_s, span_s)
    return Drain(
        rate=counted / span_s,
        records=len(dets),
        by_status=by_status,
        distinct_frames=len({(d.camera_id, d.seq) for _, d in dets}),
        boxes=sum(len(d.boxes) for _, d in dets),
        exit_code=code,
        cpu_ms_per_frame=cpu_s * 1000 / counted,
        faults_per_frame=faults / counted,
        mean_batch=statistics.fmean(d.batch_size for _, d in dets),
        longest_gap_ms=max((b[0] - a[0] for a, b in itertools.pairwise(dets)), default=0),
        broker_cores=broker_cores,
        rest_cores=rest_cores,
    )


def inferencer_run(
    args: argparse.Namespace, kafka: KafkaSettings, model: Path, workdir: Path
) -> tuple[tuple[Consumed, Consumed], Drain]:
    """One run on a fresh topic: fill it; bare consumer, framebus drain, bare consumer again.

    The baseline before and after the drain, averaged, cancels a linear drift of the machine's
    speed (other jobs starting or ending) that one fixed order would book to either side.
    """
    names = fresh_topics(kafka, args.partitions, prefix="cap")
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        # The kernel writes the fill's 1.2 GB back about 30 s later, inside some later drain,
        # unless it is written now.
        os.sync()

        def bare() -> Consumed:
            return bare_consume_process(
                kafka, names.frames_topic, args.frames, args.max_batch, keep_heap=True
            )

        before = bare()
        result = framebus_drain(kafka, names, model, args, workdir)
        after = bare()
    finally:
        delete_topics(kafka, names)
    return (before, after), result


def record_inferencer_run(side: Side, before: Consumed, after: Consumed, result: Drain) -> float:
    """Add one counted run's figures to `side`; return the baseline's rate (mean of the two)."""
    base = (before.rate + after.rate) / 2
    side.base.append(base)
    side.framebus.append(result.rate)
    side.base_cpu.append((before.cpu_ms_per_frame + after.cpu_ms_per_frame) / 2)
    side.framebus_cpu.append(result.cpu_ms_per_frame)
    side.base_faults.append((before.faults_per_frame + after.faults_per_frame) / 2)
    side.framebus_faults.append(result.faults_per_frame)
    side.framebus_gaps_ms.append(result.longest_gap_ms)
    (broker_b, rest_b), (broker_a, rest_a) = before.others(), after.others()
    side.base_broker.append((broker_b + broker_a) / 2)
    side.base_rest.append((rest_b + rest_a) / 2)
    side.framebus_broker.append(result.broker_cores)
    side.framebus_rest.append(result.rest_cores)
    return base


def inferencer_side(args: argparse.Namespace, kafka: KafkaSettings, workdir: Path) -> Side:
    """`--warm-up` + `--runs` runs of `inferencer_run`; print each run's figures."""
    model = workdir / "near-free-640.onnx"
    onnx.save(near_free_model(SIZE), str(model))
    side = Side()
    print(
        f"\n== inferencer side: {args.frames} frames from {args.cameras} cameras, "
        f"max_batch {args.max_batch}, {args.partitions} partitions, near-free engine"
    )
    print(
        f"{'run':>3} {'bare consumer f/s (before/after)':>33} {'framebus f/s':>13} {'ratio':>6}"
        f" {'CPU ms/frame bare, framebus':>28} {'faults/frame':>13} {'batch':>5} {'gap ms':>6}"
        f" {'broker cores':>12} {'rest cores':>11}  check"
    )
    for run in range(-args.warm_up, args.runs):
        (before, after), result = inferencer_run(args, kafka, model, workdir)
        if run < 0:
            base = (before.rate + after.rate) / 2
            print(
                f"{warm_up_label(run, args.warm_up):>3} {base:>33.1f} {result.rate:>13.1f} "
                f"{result.rate / base:>6.2f}  warm-up, not counted",
                flush=True,
            )
            continue
        base = record_inferencer_run(side, before, after, result)
        note = result.note(args.frames)
        side.notes.append(note)
        rates = f"{base:.1f} ({before.rate:.1f}/{after.rate:.1f})"
        cpu = f"{side.base_cpu[-1]:.2f}, {result.cpu_ms_per_frame:.2f}"
        faults = f"{side.base_faults[-1]:.0f}, {result.faults_per_frame:.0f}"
        broker = f"{side.base_broker[-1]:.2f}, {result.broker_cores:.2f}"
        rest = f"{side.base_rest[-1]:.2f}, {result.rest_cores:.2f}"
        print(
            f"{run + 1:>3} {rates:>33} {result.rate:>13.1f} {result.rate / base:>6.2f} {cpu:>28}"
            f" {faults:>13} {result.mean_batch:>5.1f} {result.longest_gap_ms:>6.0f} {broker:>12}"
            f" {rest:>11}  {note or f'{result.records} records, all INFERRED, 0 boxes'}",
            flush=True,
        )
    if args.profile:
        profile_drain(args, kafka, model, workdir)
    return side


def profile_drain(
    args: argparse.Namespace, kafka: KafkaSettings, model: Path, workdir: Path
) -> None:
    """One more drain under py-spy (not counted): where the inferencer's time goes.

    Summarise the file with `python -m bench.diagnostics.profile_summary FILE`.
    """
    names = fresh_topics(kafka, args.partitions, prefix="cap")
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        result = framebus_drain(kafka, names, model, args, workdir, profile=args.profile)
    finally:
        delete_topics(kafka, names)
    print(f"profiled drain (py-spy, not counted): {result.rate:.1f} f/s -> {args.profile}")


# ---------------------------------------------------------------------------------------------
# Workers: one inferencer process against --workers N


def ready_drain(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    args: argparse.Namespace,
    workers: int,
    workdir: Path,
) -> Drain:
    """`framebus inferencer --workers <workers>`, every worker ready, drains frames as they come.

    Ready (and every worker holding partitions) first: the supervisor starts its workers one
    after another, so on a topic filled beforehand worker 0 would drain most of it alone. CPU and faults are the whole process
    tree's (the supervisor and its workers; with 1 worker, the one process).
    """
    log_path = workdir / f"inferencer-{names.frames_topic}-w{workers}.log"
    env = {
        **inferencer_env(kafka, names, model, args.max_batch),
        "FRAMEBUS_WORKERS": str(workers),
        "FRAMEBUS_MAX_WAIT_MS": str(args.max_wait_ms),
        "FRAMEBUS_HTTP_PORT": str(free_port()),
        "FRAMEBUS_STOP_AFTER_IDLE_S": "0",  # stopped below, once every record is out
    }
    proc = ServiceProcess("inferencer", env, log_path)
    samples: UsageSamples = []
    brokers, done = broker_pids(kafka.bootstrap_servers), threading.Event()

    def sample() -> None:
        while not done.is_set():
            usage = process_tree_usage(proc.pid)
            if usage is not None:
                samples.append((time.time(), *usage, *host_usage(brokers)))
            time.sleep(CPU_SAMPLE_S)

    sampler = threading.Thread(target=sample, name="cpu-sampler", daemon=True)
    try:
        if proc.wait_ready(300) is None:
            raise RuntimeError(f"inferencer not ready; log {log_path}:\n{proc.text()[-3000:]}")
        wait_for_members(kafka, env["FRAMEBUS_CONSUMER_GROUP"], workers)
        sampler.start()
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        deadline = time.monotonic() + 300
        while end_offsets(kafka, names.detections_topic) < args.frames:
            if time.monotonic() > deadline or not proc.alive():
                raise RuntimeError(f"drain incomplete; log {log_path}:\n{proc.text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(0.5)  # samples past the last record's timestamp
        code = proc.stop(60)
    finally:
        done.set()
        proc.stop()
    return drain_figures(kafka, names, args, log_path, code, samples)


def wait_for_members(kafka: KafkaSettings, group: str, members: int, timeout_s: float = 60) -> None:
    """Until `group` has `members` members, each holding partitions.

    A worker is ready once it has joined; with the cooperative assignor the partitions it takes
    from the others come one rebalance later.
    """
    admin = AdminClient(kafka.client_config())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described = admin.describe_consumer_groups([group])[group].result(10)
        held = [len(m.assignment.topic_partitions) for m in described.members]
        if len(held) == members and all(held):
            return
        time.sleep(0.2)
    raise RuntimeError(f"group {group}: not {members} members holding partitions in {timeout_s} s")


@dataclass
class WorkersSide:
    """Per-run figures of one process and of N workers, in the same runs."""

    workers: int
    rate: dict[int, list[float]] = field(default_factory=dict)  # workers -> f/s per run
    cpu: dict[int, list[float]] = field(default_factory=dict)  # workers -> CPU ms per frame
    faults: dict[int, list[float]] = field(default_factory=dict)  # minor page faults per frame
    batch: dict[int, list[float]] = field(default_factory=dict)
    broker: dict[int, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, workers: int, drain: Drain) -> None:
        """Record one counted drain."""
        for series, value in (
            (self.rate, drain.rate),
            (self.cpu, drain.cpu_ms_per_frame),
            (self.faults, drain.faults_per_frame),
            (self.batch, drain.mean_batch),
            (self.broker, drain.broker_cores),
        ):
            series.setdefault(workers, []).append(value)


def workers_side(args: argparse.Namespace, kafka: KafkaSettings, workdir: Path) -> WorkersSide:
    """`--warm-up` + `--runs` runs: 1 worker and `--workers` N, taking turns on fresh topics."""
    model = workdir / "near-free-640.onnx"
    onnx.save(near_free_model(SIZE), str(model))
    n = args.workers
    side = WorkersSide(n)
    print(
        f"\n== workers: 1 against {n}, {args.frames} frames from {args.cameras} cameras per "
        f"drain, max_batch {args.max_batch}, {args.partitions} partitions, near-free engine; "
        "every worker ready before the frames are produced"
    )
    print(
        f"{'run':>3} {'order':>6} {'f/s 1, N':>16} {'CPU ms/frame 1, N':>18} {'N/1':>5}"
        f" {'batch 1, N':>11} {'broker cores 1, N':>18}  check"
    )
    for run in range(-args.warm_up, args.runs):
        order = (1, n) if run % 2 == 0 else (n, 1)
        drains: dict[int, Drain] = {}
        for workers in order:
            names = fresh_topics(kafka, args.partitions, prefix="capw")
            try:
                drains[workers] = ready_drain(kafka, names, model, args, workers, workdir)
            finally:
                delete_topics(kafka, names)
        one, many = drains[1], drains[n]
        note = "; ".join(
            f"{w}: {d.note(args.frames)}" for w, d in drains.items() if d.note(args.frames)
        )
        label = warm_up_label(run, args.warm_up) if run < 0 else str(run + 1)
        if run >= 0:
            side.add(1, one)
            side.add(n, many)
            side.notes.append(note)
        print(
            f"{label:>3} {'-'.join(map(str, order)):>6} {f'{one.rate:.0f}, {many.rate:.0f}':>16}"
            f" {f'{one.cpu_ms_per_frame:.3f}, {many.cpu_ms_per_frame:.3f}':>18}"
            f" {many.cpu_ms_per_frame / one.cpu_ms_per_frame:>5.2f}"
            f" {f'{one.mean_batch:.1f}, {many.mean_batch:.1f}':>11}"
            f" {f'{one.broker_cores:.2f}, {many.broker_cores:.2f}':>18}"
            f"  {'warm-up, not counted' if run < 0 else note or 'every frame one INFERRED record'}",
            flush=True,
        )
    return side


def workers_summary(side: WorkersSide) -> dict[str, Any]:
    """Print and return the medians of the workers comparison."""
    n = side.workers
    per_run = ratios(side.cpu[n], side.cpu[1])
    print(
        f"workers: median CPU per frame, 1 worker {median_of(side.cpu[1]):.3f} ms, {n} workers "
        f"together {median_of(side.cpu[n]):.3f} ms (the whole process tree, over the drain's "
        f"window); median of the per-run ratios {n}/1: {median_of(per_run):.2f} "
        f"(runs: {', '.join(f'{r:.2f}' for r in per_run)}); goal <= {WORKERS_GOAL:.2f}: "
        f"{'met' if median_of(per_run) <= WORKERS_GOAL else 'missed'}"
    )
    print(
        f"workers: median f/s {median_of(side.rate[1]):.0f} and {median_of(side.rate[n]):.0f} "
        "(bounded by the fill, which runs alongside); median batch "
        f"{median_of(side.batch[1]):.1f} and {median_of(side.batch[n]):.1f}; median minor faults "
        f"per frame {median_of(side.faults[1]):.0f} and {median_of(side.faults[n]):.0f}"
    )
    return {
        "workers": n,
        "cpu_ms_per_frame": side.cpu,
        "faults_per_frame": side.faults,
        "fps": side.rate,
        "mean_batch": side.batch,
        "broker_cores": side.broker,
        "cpu_ratios": per_run,
        "median_cpu_ratio": median_of(per_run),
        "goal": WORKERS_GOAL,
        "goal_met": median_of(per_run) <= WORKERS_GOAL,
        "notes": side.notes,
    }


# ---------------------------------------------------------------------------------------------
# Decoder side


def predecoded_frames(count: int) -> list[Any]:
    """1080p yuv420p av.VideoFrames, as PyAV's H.264 decoder hands them to a camera worker."""
    rng = np.random.default_rng(7)
    coarse = rng.integers(0, 255, (68, 120, 3), dtype=np.uint8)
    texture = cv2.resize(coarse, (SOURCE[0] + 64 * count, SOURCE[1]), interpolation=cv2.INTER_CUBIC)
    return [
        av.VideoFrame.from_ndarray(
            np.ascontiguousarray(texture[:, 64 * i : 64 * i + SOURCE[0]], np.uint8), format="rgb24"
        ).reformat(format="yuv420p")
        for i in range(count)
    ]


def decoder_producer(kafka: KafkaSettings) -> Producer:
    """The project's producer with the decoder's settings, connected and given its producer id."""
    producer = Producer(kafka, overrides=producer_overrides(DecoderSettings(kafka=kafka)))
    if not producer.wait_ready(30):
        raise RuntimeError("producer not ready after 30 s")
    return producer


def camera_thread(
    camera: str,
    frames: list[Any],
    count: int,
    publisher: FramePublisher,
    buffers: int,
    stop: threading.Event,
    fmt: FrameFormat,
) -> None:
    """A camera worker's hand-over, as `CameraWorker._hand_over` does it: letterbox, queue."""
    pool = [LetterboxBuffer(SIZE, SIZE, fmt=fmt) for _ in range(buffers)]
    free = threading.Semaphore(buffers)
    lock = threading.Lock()
    for i in range(count):
        frame = frames[i % len(frames)]
        free.acquire()
        with lock:
            buffer = pool.pop()
        lb = letterbox_frame(frame, buffer)

        def release(b: LetterboxBuffer = buffer) -> None:
            with lock:
                pool.append(b)
            free.release()

        pending = PendingFrame(
            camera_id=camera,
            capture_ts_us=time.time_ns() // 1000,
            pts_s=i / 5,
            orig_size=(frame.width, frame.height),
            letterbox=lb,
            shape=buffer.shape,
            layout=buffer.layout,
            compression=Compression.NONE,
            tensor=buffer.tensor.data.cast("B"),
            release=release,
            pixel_format=buffer.format.pixel_format,
            colour=buffer.colour,
        )
        # BLOCK: every frame is published, as the decoder does for a file read as fast as it can.
        publisher.submit(pending, BackpressurePolicy.BLOCK, stop)


@dataclass
class Spent:
    """One side's wall-clock, CPU (this process, every thread) and broker CPU over its rounds."""

    brokers: list[int]
    wall_s: float = 0.0
    cpu_s: float = 0.0
    broker_s: float = 0.0

    @contextlib.contextmanager
    def measure(self) -> Iterator[None]:
        """Add what the block spends."""
        t0, cpu0, (_, broker0) = time.perf_counter(), process_cpu_s(), host_usage(self.brokers)
        yield
        self.wall_s += time.perf_counter() - t0
        self.cpu_s += process_cpu_s() - cpu0
        self.broker_s += host_usage(self.brokers)[1] - broker0


def process_cpu_s() -> float:
    """User + system CPU seconds of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def framebus_publish(
    kafka: KafkaSettings,
    topic: str,
    frames: list[Any],
    total: int,
    cameras: int,
    spent: Spent,
    fmt: FrameFormat,
) -> None:
    """Letterbox + FramePublisher (encode, produce) to the last delivery, into `spent`."""
    settings = DecoderSettings(kafka=kafka)
    stats = DecoderStats()
    publisher = FramePublisher(decoder_producer(kafka), topic, stats, settings.max_pending_frames)
    publisher.start()
    stop = threading.Event()
    per_camera = [total // cameras + (c < total % cameras) for c in range(cameras)]
    threads = [
        threading.Thread(
            target=camera_thread,
            args=(
                f"cam-{c:02d}",
                frames,
                n,
                publisher,
                settings.max_pending_frames + 2,
                stop,
                fmt,
            ),
        )
        for c, n in enumerate(per_camera)
    ]
    with spent.measure():
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        undelivered = publisher.close(60)
    delivered = stats.total("delivered")
    if undelivered or delivered != total:
        raise RuntimeError(f"framebus publisher: {delivered} of {total} delivered")


def bare_publish(
    kafka: KafkaSettings, topic: str, records: list[tuple[str, bytes]], total: int, spent: Spent
) -> None:
    """A bare confluent_kafka.Producer (same config) producing ready record bytes, into `spent`."""
    # The bare baseline: a raw client built with the decoder's producer config.
    client = confluent_kafka.Producer(decoder_producer(kafka).config)
    with spent.measure():
        for i in range(total):
            key, value = records[i % len(records)]
            while True:
                try:
                    client.produce(topic, value=value, key=key)
                    break
                except BufferError:
                    client.poll(0.05)
            client.poll(0)
        if client.flush(60):
            raise RuntimeError("bare producer: records undelivered after 60 s")


def decoder_run(
    args: argparse.Namespace,
    kafka: KafkaSettings,
    frames: list[Any],
    records: list[tuple[str, bytes]],
) -> tuple[Spent, Spent, Spent | None, str]:
    """One run: bare producer and framebus in alternating rounds; what each spent, and a note.

    With `--frame-format i420`, framebus publishing RGB takes its turn in each round too (the
    third Spent), so the two formats are compared in the same run.

    The broker's ingest on a shared machine swings by 2-4x within seconds (page-cache writeback
    of 1.2 GB per side), so the two take turns in short rounds, in alternating order, and each
    side's rate is its frames over its summed time; its CPU a frame, this process's CPU (camera,
    publishing and librdkafka threads) over the same time.
    """
    rounds = max(1, args.rounds)
    chunk = [args.frames // rounds + (r < args.frames % rounds) for r in range(rounds)]
    fmt = FrameFormat(args.frame_format)
    compare_rgb = fmt is not FrameFormat.RGB
    sides = 3 if compare_rgb else 2
    topics = [fresh_topics(kafka, args.partitions, prefix="cap") for _ in range(sides)]
    brokers = broker_pids(kafka.bootstrap_servers)
    bare, fb = Spent(brokers), Spent(brokers)
    rgb = Spent(brokers) if compare_rgb else None
    try:
        for r, n in enumerate(chunk):
            order = list(range(sides)) if r % 2 == 0 else list(reversed(range(sides)))
            for which in order:
                topic = topics[which].frames_topic
                if which == 0:
                    bare_publish(kafka, topic, records, n, bare)
                elif which == 1:
                    framebus_publish(kafka, topic, frames, n, args.cameras, fb, fmt)
                elif rgb is not None:
                    framebus_publish(kafka, topic, frames, n, args.cameras, rgb, FrameFormat.RGB)
        counts = [end_offsets(kafka, t.frames_topic) for t in topics]
    finally:
        for t in topics:
            delete_topics(kafka, t)
    note = "" if counts == [args.frames] * sides else f"records on the topics: {counts}"
    return bare, fb, rgb, note


def decoder_side(args: argparse.Namespace, kafka: KafkaSettings) -> Side:
    """Bare producer and framebus's publishing path in alternating rounds, `runs` times."""
    frames = predecoded_frames(8)
    fmt = FrameFormat(args.frame_format)
    enc, buf = FrameEncoder(), LetterboxBuffer(SIZE, SIZE)
    records = []  # the bare producer's: the framebus path's records, ready made
    for c in range(args.cameras):
        letterbox_frame(frames[c % len(frames)], buf)
        cam = f"cam-{c:02d}"
        records.append((cam, encode_frame(enc, cam, 0, buf.hwc, pixel_format=fmt.pixel_format)))
    side = Side()
    print(
        f"\n== decoder side: {args.frames} pre-decoded 1920x1080 yuv420p frames, "
        f"{args.cameras} camera threads, {args.partitions} partitions, "
        f"{args.rounds} alternating rounds per run; framebus publishes {fmt.value}"
        + ("; framebus publishing rgb takes its turn too" if fmt is not FrameFormat.RGB else "")
    )
    print(
        f"{'run':>3} {'bare producer f/s':>18} {'framebus f/s':>13} {'ratio':>6}"
        f" {'CPU ms/frame bare, framebus':>28} {'broker ms/frame':>16}"
    )
    n = args.frames
    for run in range(-args.warm_up, args.runs):
        bare, fb, rgb, note = decoder_run(args, kafka, frames, records)
        if rgb is not None:
            note = (
                f"rgb: CPU {rgb.cpu_s * 1000 / n:.3f} ms/frame, broker "
                f"{rgb.broker_s * 1000 / n:.3f} ms/frame {note}"
            )
        base_rate, fb_rate = n / bare.wall_s, n / fb.wall_s
        cpu = f"{bare.cpu_s * 1000 / n:.3f}, {fb.cpu_s * 1000 / n:.3f}"
        broker = f"{bare.broker_s * 1000 / n:.3f}, {fb.broker_s * 1000 / n:.3f}"
        if run < 0:
            label, note = warm_up_label(run, args.warm_up), "warm-up, not counted"
        else:
            label = str(run + 1)
            side.base.append(base_rate)
            side.framebus.append(fb_rate)
            side.base_cpu.append(bare.cpu_s * 1000 / n)
            side.framebus_cpu.append(fb.cpu_s * 1000 / n)
            side.base_broker_ms.append(bare.broker_s * 1000 / n)
            side.framebus_broker_ms.append(fb.broker_s * 1000 / n)
            if rgb is not None:
                side.rgb_cpu.append(rgb.cpu_s * 1000 / n)
                side.rgb_broker_ms.append(rgb.broker_s * 1000 / n)
            side.notes.append(note)
        print(
            f"{label:>3} {base_rate:>18.1f} {fb_rate:>13.1f} {fb_rate / base_rate:>6.2f}"
            f" {cpu:>28} {broker:>16}  {note}",
            flush=True,
        )
    return side


# ---------------------------------------------------------------------------------------------


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
