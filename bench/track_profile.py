"""`bench.track --profile`: where a record's time goes, and the ceilings the fixed costs leave.

The in-memory cost of each step of the service's per-record work, fastavro's own read and write
of the same records (the codec's floor), the CPU a record of an in-process `StatefulRunner`
relaying (`Relay`: the Kafka loop with no work of its own) and tracking, and a cProfile of one
in-process drain, printed by `print_profile`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import threading
import time
from collections.abc import Callable
from typing import Any

import fastavro

from bench.track_kafka import RunTopics, fill
from framebus.codec import HEADER_BYTES, DetectionsCodec, TracksCodec, load_schema
from framebus.kafka.changelog import encode_state
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.stateful import KeyedProcessor, Output, Processed, StatefulRunner, StatefulStats
from framebus.messages import Detections, Tracks
from framebus.telemetry import tracing
from framebus_tracker.service import TrackProcessor, ensure_tracker_topics, stateful_config
from framebus_tracker.settings import TrackerSettings
from framebus_tracker.tracker import CameraTracker, TrackerConfig


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
