"""The latency `bench.track` measures: paced detections, and a reader in a process of its own.

`paced_hop` produces records at a given rate while a spawned reader (`_reader_child`) reads the
other end, so the reader's work does not delay the producer; `latency_run` does it once through
the tracker and once as the direct hop (no tracker), and returns both as a `Latency`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.track_kafka import RunTopics, stop_process, tracker_process, tracks_reader, wait_assigned
from bench.track_records import generate
from framebus.codec import DetectionsCodec, TracksCodec
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Detections
from framebus_tools.runstats import percentile


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
