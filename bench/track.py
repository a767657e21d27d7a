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

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.benchkit import (
    add_bootstrap_argument,
    parser_for,
    print_header,
    print_median_ratio,
    process_usage,
    ratios,
    runs_text,
)
from bench.track_kafka import RunTopics, fill, stop_process, tracker_process, tracks_reader
from bench.track_latency import Latency, latency_run
from bench.track_profile import print_profile
from bench.track_records import Ids, generate, track_ids
from framebus.codec import DetectionsCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Detections, Tracks
from framebus_tracker.tracker import CameraTracker, TrackerConfig

GOAL = 0.80
SAMPLE_S = 0.05  # how often the tracker process's CPU is read


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
