"""Tracker throughput against the bare tracker loop, and the latency it adds at 80 % of capacity.

The same generated detections (`testkit.walkers`: --cameras cameras, --frames records each,
about --boxes walkers in every frame) go through two paths in each run, taking turns:

- baseline: the bare tracker loop, `CameraTracker.step` over the records already decoded and in
  memory (one tracker per camera, as the service keeps), in this process;
- subject: `python -m framebus_tracker` (a process) draining a fresh --partitions detections topic
  filled beforehand: consume, Avro decode, step, encode, and per batch one Kafka transaction with
  the tracks, the cameras' states (changelog) and the offsets. Counted from the first tracks
  record's CreateTime to the moment a read_committed reader has the last one (so the last commit
  is in), the first record left out (start-up and group join). Its CPU comes from /proc (the
  librdkafka threads included). The track ids must equal the bare loop's, record for record.

Ratio = service frames/s / bare loop frames/s (boxes/s give the same ratio: same records).

Latency: the tracker running, detections produced paced at --load-fraction of the median service
rate just measured, for --latency-s after --warm-up-s; per record, a read_committed reader's
receive time of its tracks record less the time its detections record was handed to produce()
(the producer is the inferencer's: framebus's Producer, linger 5 ms). As a reference, the same
paced hop with no tracker: detections records produced and read back directly. Readers run in a
process of their own and decode only after the window. p50/p99 per run, medians over runs.

--profile adds the in-memory cost of each step of the service's per-record work (decode, step,
trace span, encode, state snapshot); fastavro's own read and write of the same records (no
record objects built); the CPU a record of the service's Kafka loop (`StatefulRunner`, in this
process) draining the same records twice, once relaying each record's bytes with nothing else to
do and once tracking; the ratios those fixed costs alone would leave, step / (step + cost); and a
cProfile of one in-process drain (`service.run`).

Goal: service / bare loop >= 0.80 (median of per-run ratios); the latency has no goal here.

    .venv/bin/python -m bench.track [--runs 3] [--cameras 16] [--frames 600] [--boxes 8]
        [--partitions 4] [--latency-s 10] [--bootstrap 127.0.0.1:29092] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing
import pstats
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import confluent_kafka
import fastavro
import numpy as np

from bench.benchkit import (
    add_bootstrap_argument,
    delete_topics,
    parser_for,
    print_header,
    print_median_ratio,
    process_usage,
    ratios,
    runs_text,
)
from framebus.codec import HEADER_BYTES, DetectionsCodec, TracksCodec, load_schema
from framebus.kafka.changelog import encode_state
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.stateful import (
    KeyedProcessor,
    Output,
    Processed,
    StatefulRunner,
    StatefulStats,
)
from framebus.kafka.topics import ensure_topics
from framebus.messages import Detections, Tracks
from framebus.telemetry import tracing
from framebus.topology import Sizing, Topic, TopicSettings, pipeline_specs
from framebus_tools.process import ServiceProcess
from framebus_tools.runstats import percentile
from framebus_tracker.service import TrackProcessor, ensure_tracker_topics, stateful_config
from framebus_tracker.settings import TrackerSettings
from framebus_tracker.tracker import CameraTracker, TrackerConfig
from testkit.walkers import camera_detections

GOAL = 0.80
FPS = 5.0  # the generated cameras' sampling rate (capture time between a camera's records)
CROSS_S = 7.6  # mean time a walker takes to cross the 1280-px frame (walkers.py's speeds)
SAMPLE_S = 0.05  # how often the tracker process's CPU is read
Ids = dict[tuple[str, int], tuple[str, ...]]  # (camera, seq) -> the track id of each box


def generate(cameras: int, frames: int, boxes: float, seed: int = 0) -> list[Detections]:
    """`frames` records per camera interleaved as a live feed, about `boxes` walkers in each."""
    duration_s = frames / FPS
    count = max(1, round(boxes * duration_s / CROSS_S))
    per_camera = [
        list(camera_detections(f"cam-{c:02d}", FPS, duration_s, seed + c, count))
        for c in range(cameras)
    ]
    return [per_camera[c][i] for i in range(frames) for c in range(cameras)]


def track_ids(tracks: Tracks) -> tuple[str, ...]:
    """The track id of each object, in the detections' order."""
    return tuple(o.track_id for o in tracks.objects)


# ---------------------------------------------------------------------------------------------
# Baseline: the bare loop


@dataclass(frozen=True)
class Rate:
    """Frames/s over a window and the CPU spent in it."""

    rate: float
    cpu_ms_per_frame: float
    note: str = ""


def bare_loop(dets: list[Detections]) -> tuple[Rate, Ids]:
    """`CameraTracker.step` over decoded records with fresh trackers; rate, CPU and the ids."""
    config = TrackerConfig()
    trackers: dict[str, CameraTracker] = {}
    out: list[Tracks | None] = []
    cpu0, t0 = time.process_time(), time.perf_counter()
    for det in dets:
        tracker = trackers.get(det.camera_id)
        if tracker is None:
            tracker = trackers[det.camera_id] = CameraTracker(det.camera_id, config)
        out.append(tracker.step(det))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    ids = {(t.camera_id, t.seq): track_ids(t) for t in out if t is not None}
    return Rate(len(dets) / wall, cpu * 1000 / len(dets)), ids


# ---------------------------------------------------------------------------------------------
# Topics


@dataclass(frozen=True)
class RunTopics:
    """One run's fresh topics (named by `framebus.topology`), group and transactional id."""

    names: TopicSettings
    group: str

    @property
    def detections(self) -> str:
        """The detections topic the run fills."""
        return self.names.detections_topic

    @property
    def tracks(self) -> str:
        """The tracks topic the run reads."""
        return self.names.tracks_topic

    @classmethod
    def fresh(cls, kafka: KafkaSettings, partitions: int) -> RunTopics:
        """New uuid names; the detections, tracks, changelog and dead-letter topics created."""
        run = f"bench-track-{uuid.uuid4().hex[:10]}"
        names = TopicSettings.with_prefix(run)
        # The tracks topic too, so that its reader is subscribed before the tracker starts.
        sizing = Sizing(detections_partitions=partitions, replication_factor=1)
        ensure_topics(kafka, pipeline_specs(names, sizing, TRACKER_TOPICS))
        return cls(names, run)

    def delete(self, kafka: KafkaSettings) -> None:
        """Drop the run's topics."""
        delete_topics(kafka, self.names)

    def settings(self, kafka: KafkaSettings, stop_after_idle_s: float) -> TrackerSettings:
        """The tracker's settings for these topics."""
        return TrackerSettings(
            kafka=kafka,
            topics=self.names,
            tracker_group=self.group,
            transactional_id=self.group,
            stop_after_idle_s=stop_after_idle_s,
        )

    def env(self, kafka: KafkaSettings, stop_after_idle_s: float) -> dict[str, str]:
        """The same settings as FRAMEBUS_* variables for `python -m framebus_tracker`."""
        return {
            "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            **self.names.env(),
            "FRAMEBUS_TRACKER_GROUP": self.group,
            "FRAMEBUS_TRANSACTIONAL_ID": self.group,
            "FRAMEBUS_STOP_AFTER_IDLE_S": str(stop_after_idle_s),
            "FRAMEBUS_LOG_LEVEL": "info",
        }


# What the tracker reads and writes, created before it starts.
TRACKER_TOPICS = (Topic.DETECTIONS, Topic.TRACKS, Topic.TRACKER_CHANGELOG, Topic.DEADLETTER)


def fill(kafka: KafkaSettings, topic: str, values: list[tuple[str, bytes]]) -> None:
    """Produce the encoded detections, keyed by camera, as the inferencer does."""
    with Producer(kafka) as producer:
        for camera, value in values:
            producer.produce(topic, value, key=camera, block_s=30.0)
        if producer.flush(60):
            raise RuntimeError(f"filling {topic}: records undelivered after 60 s")


def tracks_reader(kafka: KafkaSettings, topic: str) -> Any:
    """A read_committed consumer of `topic` from the beginning, in a group of its own."""
    client = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"bench-read-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.min.bytes": 1,
        }
    )
    client.subscribe([topic])
    return client


def tracker_process(
    topics: RunTopics, kafka: KafkaSettings, log: Path, stop_after_idle_s: float
) -> ServiceProcess:
    """`framebus track` on the run's topics, its output in `log`.

    The idle time counts from its start, and restoring the states on assignment counts: give
    it seconds (0: until SIGTERM).
    """
    log.unlink(missing_ok=True)
    return ServiceProcess("track", topics.env(kafka, stop_after_idle_s), log)


def stop_process(proc: ServiceProcess, log: Path, wait_s: float = 20) -> None:
    """Wait `wait_s` for the tracker to idle out, then SIGTERM it; raise on a failed exit."""
    try:
        code = proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        code = proc.stop(30)
    if code:
        raise RuntimeError(f"tracker exited with {code}; log {log}:\n{log.read_text()[-3000:]}")


# ---------------------------------------------------------------------------------------------
# Subject: the tracker service draining a filled topic


def service_drain(kafka: KafkaSettings, topics: RunTopics, expected: Ids, workdir: Path) -> Rate:
    """The tracker process draining the topic; frames/s and CPU until the last commit is read."""
    log = workdir / f"{topics.group}.log"
    reader = tracks_reader(kafka, topics.tracks)
    proc = tracker_process(topics, kafka, log, 5.0)
    got: list[Any] = []
    samples: list[tuple[float, float]] = []  # (wall-clock s, the tracker's CPU s)
    deadline = time.monotonic() + 300
    try:
        while len(got) < len(expected):
            if time.monotonic() > deadline or proc.exit_code() is not None:
                raise RuntimeError(
                    f"{len(got)} of {len(expected)} tracks records (exit {proc.exit_code()}); "
                    f"log {log}:\n{log.read_text()[-3000:]}"
                )
            got += [m for m in reader.consume(1000, SAMPLE_S) if m.error() is None]
            last_read = time.time()
            usage = process_usage(proc.pid)
            if usage is not None:
                samples.append((last_read, usage[0]))
    finally:
        reader.close()
        stop_process(proc, log)
    first = min(m.timestamp()[1] for m in got) / 1000  # CreateTime: the tracker's produce()
    times, cpus = [s[0] for s in samples], [s[1] for s in samples]
    cpu = float(np.interp(last_read, times, cpus) - np.interp(first, times, cpus))
    codec = TracksCodec()
    tracks = [codec.decode(m.value()) for m in got]
    ids = {(t.camera_id, t.seq): track_ids(t) for t in tracks}
    wrong = sum(1 for key, value in expected.items() if ids.get(key) != value)
    note = (
        f"{wrong} of {len(expected)} records' track ids differ from the bare loop" if wrong else ""
    )
    counted = len(got) - 1
    return Rate(counted / (last_read - first), cpu * 1000 / counted, note)


# ---------------------------------------------------------------------------------------------
# Latency: paced detections, a reader in a process of its own


def _reader_child(
    bootstrap: str, topic: str, kind: str, expected: int, ready: Connection, out: Connection
) -> None:
    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    client = tracks_reader(kafka, topic)
    while not client.assignment():
        client.poll(0.1)
    ready.send("ready")
    got: list[tuple[float, float, bytes]] = []
    idle_since = time.monotonic()
    while len(got) < expected and time.monotonic() - idle_since < 15:
        batch = client.consume(1, 0.5)  # the first waits; the rest is what is already fetched
        if batch:
            batch += client.consume(999, 0)
        now = time.time()
        values = [(now, m.timestamp()[1] / 1000, m.value()) for m in batch if m.error() is None]
        if values:
            got += values
            idle_since = time.monotonic()
    client.close()
    codec: Any = TracksCodec() if kind == "tracks" else DetectionsCodec()
    received = []
    for at, created, value in got:
        record = codec.decode(value)
        received.append((record.camera_id, record.seq, at, created))
    out.send(received)


def paced_hop(
    kafka: KafkaSettings,
    topics: tuple[str, str],
    kind: str,
    values: list[tuple[Detections, bytes]],
    rate: float,
) -> dict[tuple[str, int], tuple[float, float]]:
    """Produce `values` at `rate`/s to topics[0] while a reader process reads topics[1].

    Returns, per record, the read time and the read record's CreateTime, each less the time the
    source record was handed to produce() (s).
    """
    source, topic = topics
    context = multiprocessing.get_context("spawn")
    ready_recv, ready_send = context.Pipe(duplex=False)
    out_recv, out_send = context.Pipe(duplex=False)
    args = (kafka.bootstrap_servers, topic, kind, len(values), ready_send, out_send)
    child = context.Process(target=_reader_child, args=args, daemon=True)
    child.start()
    if not ready_recv.poll(60):
        child.kill()
        raise RuntimeError(f"the reader of {topic} got no partitions in 60 s")
    sent: dict[tuple[str, int], float] = {}
    with Producer(kafka) as producer:
        producer.wait_ready(10)
        start = time.perf_counter()
        for i, (det, value) in enumerate(values):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent[(det.camera_id, det.seq)] = time.time()
            producer.produce(source, value, key=det.camera_id, block_s=5.0)
    received = out_recv.recv() if out_recv.poll(90) else []
    child.join(10)
    return {
        (c, s): (at - sent[(c, s)], ct - sent[(c, s)])
        for c, s, at, ct in received
        if (c, s) in sent
    }


@dataclass(frozen=True)
class Latency:
    """p50/p99 (ms) of the paced hop with the tracker and without it; records lost.

    `to_produce`: detections produce() -> the tracker's produce() of its tracks record (the
    batch wait, decode, step, encode); the rest is the transaction's commit and the read.
    """

    p50: float
    p99: float
    to_produce_p50: float
    to_produce_p99: float
    ref_p50: float
    ref_p99: float
    missing: int


def latency_run(
    kafka: KafkaSettings, args: argparse.Namespace, rate: float, workdir: Path
) -> Latency:
    """The tracker under paced load, then the direct hop at the same rate; warm-up left out."""
    total = round(rate * (args.warm_up_s + args.latency_s))
    dets = generate(args.cameras, -(-total // args.cameras), args.boxes, seed=100)[:total]
    codec = DetectionsCodec()
    values = [(d, codec.encode(d)) for d in dets]
    warm = round(rate * args.warm_up_s)
    measured = {(d.camera_id, d.seq) for d in dets[warm:]}
    figures: list[list[float]] = []
    for with_tracker in (True, False):
        topics = RunTopics.fresh(kafka, args.partitions)
        try:
            if with_tracker:
                log = workdir / f"{topics.group}.log"
                proc = tracker_process(topics, kafka, log, 0)
                wait_assigned(proc, log)
                lat = paced_hop(kafka, (topics.detections, topics.tracks), "tracks", values, rate)
                stop_process(proc, log, wait_s=0)
            else:
                lat = paced_hop(kafka, (topics.detections,) * 2, "detections", values, rate)
        finally:
            topics.delete(kafka)
        ms = [lat[k][0] * 1000 for k in measured if k in lat]
        produced = [lat[k][1] * 1000 for k in measured if k in lat]
        figures.append(
            [percentile(ms, 50), percentile(ms, 99), len(measured) - len(ms)]
            + [percentile(produced, 50), percentile(produced, 99)]
        )
    (p50, p99, missing, tp50, tp99), (ref_p50, ref_p99, ref_missing, _, _) = figures
    return Latency(p50, p99, tp50, tp99, ref_p50, ref_p99, int(missing + ref_missing))


def wait_assigned(proc: ServiceProcess, log: Path, timeout_s: float = 60) -> None:
    """Until the tracker logs its partitions assigned (so no record waits for its start-up)."""
    deadline = time.monotonic() + timeout_s
    while "assigned" not in log.read_text():
        if proc.exit_code() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"tracker not assigned; log {log}:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# Profile


def step_costs(dets: list[Detections]) -> dict[str, float]:
    """Microseconds per record of each in-memory step of the service's per-record work."""
    det_codec, tracks_codec = DetectionsCodec(), TracksCodec()
    tracer = tracing.tracer("bench.track")
    encoded = [det_codec.encode(d) for d in dets]
    trackers: dict[str, CameraTracker] = {}
    out: list[Tracks] = []
    marks = [time.perf_counter()]
    decoded = [det_codec.decode(v) for v in encoded]
    marks.append(time.perf_counter())
    for det in decoded:
        tracker = trackers.get(det.camera_id)
        if tracker is None:
            tracker = trackers[det.camera_id] = CameraTracker(det.camera_id, TrackerConfig())
        tracks = tracker.step(det)
        if tracks is not None:
            out.append(tracks)
    marks.append(time.perf_counter())
    for _ in out:
        with tracer.start_as_current_span("framebus.track", context=tracing.extract_context([])):
            tracing.inject_headers()
    marks.append(time.perf_counter())
    tracks_encoded = [tracks_codec.encode(tracks) for tracks in out]
    marks.append(time.perf_counter())
    for _ in range(len(dets) // len(trackers)):  # one state per camera a batch: the upper bound
        for tracker in trackers.values():
            encode_state(tracker.snapshot(), "t", 0, 0)
    marks.append(time.perf_counter())
    names = ["decode", "step", "trace span", "encode", "snapshot (each record)"]
    costs = {
        n: (b - a) * 1e6 / len(dets) for n, a, b in zip(names, marks[:-1], marks[1:], strict=True)
    }
    return costs | fastavro_costs(encoded, tracks_encoded)


def fastavro_costs(detections: list[bytes], tracks: list[bytes]) -> dict[str, float]:
    """The floor under the codec: fastavro alone on the same bodies, no record objects built."""
    det_schema = fastavro.parse_schema(load_schema("detections"))
    tracks_schema = fastavro.parse_schema(load_schema("tracks"))
    bodies = [
        fastavro.schemaless_reader(io.BytesIO(v[HEADER_BYTES:]), tracks_schema) for v in tracks
    ]
    started = time.perf_counter()
    for v in detections:
        fastavro.schemaless_reader(io.BytesIO(v[HEADER_BYTES:]), det_schema)
    read = time.perf_counter()
    for body in bodies:
        fastavro.schemaless_writer(io.BytesIO(), tracks_schema, body)
    written = time.perf_counter()
    return {
        "fastavro read alone": (read - started) * 1e6 / len(detections),
        "fastavro write alone": (written - read) * 1e6 / len(detections),
    }


class Relay:
    """A KeyedProcessor that forwards each record's bytes: the Kafka loop with no work of its own.

    Its state is one small entry per camera, so the changelog write stays in the loop.
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.last: dict[str, int] = {}

    def process(self, msg: Any) -> Processed:
        """Forward the value under its key."""
        key = (msg.key() or b"").decode()
        self.last[key] = msg.offset() or 0
        return Processed(key, [Output(self.topic, key, msg.value() or b"")])

    def snapshot(self, key: str) -> dict[str, int]:
        """The camera's last offset."""
        return {"offset": self.last[key]}

    def restore(self, key: str, state: Any) -> None:
        """Nothing to restore in a fresh topic."""

    def forget(self, key: str) -> None:
        """Drop the camera."""
        self.last.pop(key, None)


def loop_cpu_us(
    kafka: KafkaSettings,
    args: argparse.Namespace,
    values: list[tuple[str, bytes]],
    processor: Callable[[TrackerSettings], KeyedProcessor],
) -> float:
    """CPU µs a record of an in-process StatefulRunner draining `values` with `processor`.

    This process's CPU (librdkafka's threads included) from its first commit to its last, over
    the records in between: the group join, the first batch and the idle wait are left out.
    """
    topics = RunTopics.fresh(kafka, args.partitions)
    stats = StatefulStats()
    marks: list[tuple[float, int]] = []  # (CPU s, records) at each commit
    try:
        fill(kafka, topics.detections, values)
        settings = topics.settings(kafka, 3.0)
        ensure_tracker_topics(settings)
        StatefulRunner(
            kafka,
            stateful_config(settings),
            processor(settings),
            stats,
            on_committed=lambda _: marks.append((time.process_time(), stats.records)),
        ).run(threading.Event())
    finally:
        topics.delete(kafka)
    if stats.records != len(values) or len(marks) < 2:
        raise RuntimeError(f"the loop read {stats.records} of {len(values)} records")
    (cpu0, records0), (cpu1, records1) = marks[0], marks[-1]
    return (cpu1 - cpu0) * 1e6 / (records1 - records0)


def loop_costs(
    kafka: KafkaSettings, args: argparse.Namespace, dets: list[Detections]
) -> dict[str, float]:
    """The same in-process StatefulRunner draining the same records: relaying, then tracking."""
    codec = DetectionsCodec()
    values = [(d.camera_id, codec.encode(d)) for d in dets]
    relay = loop_cpu_us(kafka, args, values, lambda s: Relay(s.topics.tracks_topic))
    tracking = loop_cpu_us(kafka, args, values, TrackProcessor)
    return {"Kafka loop relaying": relay, "Kafka loop tracking": tracking}


def profile_drain(kafka: KafkaSettings, args: argparse.Namespace, dets: list[Detections]) -> str:
    """cProfile of `framebus_tracker.service.run` draining a filled topic in this process."""
    from framebus_tracker import service

    topics = RunTopics.fresh(kafka, args.partitions)
    codec = DetectionsCodec()
    try:
        fill(kafka, topics.detections, [(d.camera_id, codec.encode(d)) for d in dets])
        profiler = cProfile.Profile()
        profiler.runcall(service.run, topics.settings(kafka, 5.0), threading.Event())
    finally:
        topics.delete(kafka)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(18)
    return text.getvalue()


def print_profile(kafka: KafkaSettings, args: argparse.Namespace, dets: list[Detections]) -> None:
    """Where the time goes, the ceilings the fixed costs leave, and a cProfile of one drain."""
    costs = step_costs(dets)
    print("in-memory cost a record, us: " + json.dumps({k: round(v, 1) for k, v in costs.items()}))
    loops = loop_costs(kafka, args, dets)
    print(
        "CPU a record, us, of one in-process StatefulRunner draining the same records: "
        + json.dumps({k: round(v, 1) for k, v in loops.items()})
    )
    step, relay = costs["step"], loops["Kafka loop relaying"]
    avro = costs["fastavro read alone"] + costs["fastavro write alone"]
    print(
        "ceilings, step / (step + fixed cost): fastavro's read + write "
        f"{step / (step + avro):.2f}; the relaying loop {step / (step + relay):.2f}; "
        f"both {step / (step + relay + avro):.2f}"
    )
    print(profile_drain(kafka, args, dets))


# ---------------------------------------------------------------------------------------------


def main() -> int:
    parser = parser_for(__doc__)
    add_bootstrap_argument(parser)
    parser.add_argument("--runs", type=int, default=3, help="runs (medians; default 3)")
    parser.add_argument("--cameras", type=int, default=16, help="cameras (default 16)")
    parser.add_argument("--frames", type=int, default=600, help="records per camera (600)")
    parser.add_argument("--boxes", type=float, default=8, help="walkers per frame, about (8)")
    parser.add_argument("--partitions", type=int, default=4, help="detections partitions (4)")
    parser.add_argument("--load-fraction", type=float, default=0.8, help="of capacity (0.8)")
    parser.add_argument("--latency-s", type=float, default=10, help="paced seconds measured")
    parser.add_argument("--warm-up-s", type=float, default=3, help="paced seconds left out")
    parser.add_argument("--profile", action="store_true", help="step costs and a cProfile")
    args = parser.parse_args()
    print_header(None)
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    dets = generate(args.cameras, args.frames, args.boxes)
    boxes = sum(len(d.boxes) for d in dets) / len(dets)
    codec = DetectionsCodec()
    values = [(d.camera_id, codec.encode(d)) for d in dets]
    print(
        f"{len(dets)} detections records: {args.cameras} cameras x {args.frames}, "
        f"{boxes:.2f} boxes a record; {args.partitions} partitions; {args.runs} runs"
    )
    bare: list[Rate] = []
    served: list[Rate] = []
    with tempfile.TemporaryDirectory(prefix="bench-track-") as tmp:
        for run in range(args.runs):
            base, ids = bare_loop(dets)
            topics = RunTopics.fresh(kafka, args.partitions)
            try:
                fill(kafka, topics.detections, values)
                drain = service_drain(kafka, topics, ids, Path(tmp))
            finally:
                topics.delete(kafka)
            bare.append(base)
            served.append(drain)
            print(
                f"run {run + 1}: bare loop {base.rate:,.0f} frames/s "
                f"({base.rate * boxes:,.0f} boxes/s, {base.cpu_ms_per_frame:.3f} ms CPU a frame); "
                f"service {drain.rate:,.0f} frames/s ({drain.rate * boxes:,.0f} boxes/s, "
                f"{drain.cpu_ms_per_frame:.3f} ms CPU a frame); "
                f"ratio {drain.rate / base.rate:.3f}{'; ' + drain.note if drain.note else ''}",
                flush=True,
            )
        per_run = ratios([s.rate for s in served], [b.rate for b in bare])
        capacity = statistics.median(s.rate for s in served)
        print(
            f"medians: bare loop {statistics.median(b.rate for b in bare):,.0f} frames/s, "
            f"service {capacity:,.0f} frames/s ({capacity * boxes:,.0f} boxes/s); CPU a frame "
            f"{statistics.median(b.cpu_ms_per_frame for b in bare):.3f} ms bare, "
            f"{statistics.median(s.cpu_ms_per_frame for s in served):.3f} ms service"
        )
        print_median_ratio("tracker service / bare loop", per_run, GOAL)
        rate = capacity * args.load_fraction
        print(f"latency: {rate:,.0f} records/s ({args.load_fraction:.0%} of {capacity:,.0f})")
        lats = []
        for run in range(args.runs):
            lat = latency_run(kafka, args, rate, Path(tmp))
            lats.append(lat)
            print(
                f"run {run + 1}: with the tracker p50 {lat.p50:.1f} ms, p99 {lat.p99:.1f} ms "
                f"(to its produce() p50 {lat.to_produce_p50:.1f}, p99 {lat.to_produce_p99:.1f}); "
                f"direct hop p50 {lat.ref_p50:.1f} ms, p99 {lat.ref_p99:.1f} ms"
                f"{f'; {lat.missing} records missing' if lat.missing else ''}",
                flush=True,
            )
    median = {
        f: statistics.median(getattr(x, f) for x in lats) for f in Latency.__dataclass_fields__
    }
    print(
        f"latency medians: detections produce() -> tracks read (read_committed) p50 "
        f"{median['p50']:.1f} ms, p99 {median['p99']:.1f} ms (to the tracker's produce() p50 "
        f"{median['to_produce_p50']:.1f} ms, p99 {median['to_produce_p99']:.1f} ms); direct hop p50 "
        f"{median['ref_p50']:.1f} ms, p99 {median['ref_p99']:.1f} ms; the tracker adds p50 "
        f"{median['p50'] - median['ref_p50']:.1f} ms, p99 {median['p99'] - median['ref_p99']:.1f} ms"
        f" (runs p99 {runs_text([x.p99 for x in lats])})"
    )
    if args.profile:
        print_profile(kafka, args, dets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
