"""Capacity at GPU speed: framebus's own cost against bare Kafka clients, with a near-free engine.

With an engine that costs almost nothing (a generated ONNX model with a 640x640 input that reads
one pixel and returns an all-zero YOLOv8 head, `near_free_model`), what is left of a pipeline's
time is framebus itself, which is what bounds a replica in front of a fast GPU. Two sides, each
against a baseline measured in the same run, medians of the per-run figures:

- inferencer: a fresh frames topic is filled with N frame records from C cameras (the decoder's
  own encoder, uint8 640x640x3, keyed by camera id). Baseline: a bare confluent_kafka.Consumer
  with the framebus consumer's settings, in a fresh process of its own as the inferencer is, with
  glibc's heap thresholds set as the inferencer sets them (`framebus.malloc`),
  reading the same records from the beginning (bytes only).
  Subject: `framebus inferencer` (a subprocess) draining the same topic from the beginning:
  decode, batch, infer, postprocess, publish one detections record per frame, commit. Rates
  leave out start-up and warm-up: both count from the first delivery (the first consume() that
  returned records / the first batch's detections records, by their broker timestamps) to the
  last, and the records of that first delivery are not counted.
- decoder: one decoder process's publishing path from pre-decoded 1080p frames (the decoder reads
  only from URLs, so this runs its parts in-process): C camera threads letterbox each frame with
  `letterbox_frame` into their reused buffers and hand it to the real `FramePublisher` (wire
  encode, produce through the project's Producer with the decoder's settings, delivery reports).
  Baseline: a bare confluent_kafka.Producer with the same configuration producing the same
  record bytes, already encoded. Both from the first frame to the last delivery report.

The inferencer side also reports each process's CPU per frame over the same window (user +
system; the baseline's from getrusage, the inferencer's from /proc/<pid>/stat sampled every
50 ms and interpolated at the first and last detections' timestamps): a figure the host's other
jobs move less than the rates, and which says how much of the two cores each path needs; with
each process's minor page faults per frame over the same window (the kernel zeroing fresh pages
for the heap), the drain's mean batch size, and the longest time between two of its batches'
records (at about 100 batches/s a drain's batches are 10 ms apart: a gap of 40 ms or more is a
stall, such as a detections ProduceRequest the broker answered late), and what else ran over each
side's window, in cores: the local broker (its `kafka.Kafka` process) and the rest of the host's
busy CPU (`/proc/stat`, steal included). framebus is CPU-bound on two cores and the baseline is
not, so whatever else runs comes out of framebus's rate: a slow run shows it in those columns.

So that a machine that speeds up or slows down during a run (other jobs) favours neither side,
the inferencer side measures its baseline before and after the drain and uses their mean, and the
decoder side alternates the two in short rounds (4 per run), summing each side's time. Each side
starts with `--warm-up` runs (2) that are printed but not counted: on a freshly started broker the
JVM's JIT compiler took 20-40 % of a core through the first few drains (perf), time the CPU-bound
framebus side lost and the baseline, which leaves a core idle, did not.

    python bench/capacity.py [--frames 960] [--cameras 16] [--runs 3] [--warm-up 2] [--max-batch 16]
        [--bootstrap 127.0.0.1:29092] [--side inferencer|decoder|both] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import confluent_kafka
import cv2
import numpy as np
import onnx
import onnxruntime as ort
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from framebus.codec import DetectionsCodec
from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.kafka.topics import ensure_topics, framebus_topics
from framebus.letterbox import Letterbox
from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, keep_freed_heap
from framebus.messages import Compression, FrameStatus, TensorLayout
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.publisher import FramePublisher, PendingFrame
from framebus_decoder.service import producer_overrides
from framebus_decoder.settings import BackpressurePolicy, DecoderSettings
from framebus_decoder.source import letterbox_frame
from framebus_decoder.stats import DecoderStats
from framebus_decoder.wire import FrameEncoder
from framebus_tools.perf.tune import machine_info
from framebus_tools.testmodels import near_free_model

SIZE = 640
SOURCE = (1920, 1080)
GOAL = 0.80
WARM_UP_RUNS = 2  # uncounted runs first: a fresh broker JIT-compiles through its first drains
IMAGES = 4  # distinct prepared tensors, reused: content does not change any cost measured here


@dataclass
class Side:
    """Per-run figures of one side: baseline and framebus rates, and notes on each run."""

    base: list[float] = field(default_factory=list)
    framebus: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # CPU milliseconds per frame of each side's process (inferencer side only)
    base_cpu: list[float] = field(default_factory=list)
    framebus_cpu: list[float] = field(default_factory=list)
    # and their minor page faults per frame
    base_faults: list[float] = field(default_factory=list)
    framebus_faults: list[float] = field(default_factory=list)
    # the longest time between two of a drain's batches (inferencer side only)
    framebus_gaps_ms: list[float] = field(default_factory=list)
    # what else ran over each side's window, in cores: the local broker, and the rest of the host
    base_broker: list[float] = field(default_factory=list)
    framebus_broker: list[float] = field(default_factory=list)
    base_rest: list[float] = field(default_factory=list)
    framebus_rest: list[float] = field(default_factory=list)

    def ratios(self) -> list[float]:
        """framebus / baseline of each run."""
        return [f / b for f, b in zip(self.framebus, self.base, strict=True)]


# ---------------------------------------------------------------------------------------------
# Topics and records


def fresh_topics(kafka: KafkaSettings, partitions: int) -> TopicSettings:
    """A fresh set of frames/detections/dead-letter topics, created like `framebus topics`."""
    run = uuid.uuid4().hex[:10]
    names = TopicSettings(f"cap-{run}.frames", f"cap-{run}.detections", f"cap-{run}.dlq")
    ensure_topics(kafka, framebus_topics(names, partitions, partitions))
    return names


def delete_topics(kafka: KafkaSettings, names: TopicSettings) -> None:
    """Drop a run's topics: 960 frames are 1.2 GB of broker log."""
    admin = AdminClient(kafka.client_config())
    topics = [names.frames_topic, names.detections_topic, names.deadletter_topic]
    for future in admin.delete_topics(topics, request_timeout=30).values():
        with contextlib.suppress(confluent_kafka.KafkaException):  # already gone: nothing to do
            future.result(30)


def prepared_tensors() -> list[np.ndarray]:
    """A few letterboxed-looking uint8 640x640x3 tensors (grey padding, noise inside)."""
    rng = np.random.default_rng(1)
    lb = Letterbox.fit(*SOURCE, SIZE, SIZE)
    out = []
    for _ in range(IMAGES):
        t = np.full((SIZE, SIZE, 3), 114, np.uint8)
        t[lb.pad_y : lb.pad_y + lb.resized_height] = rng.integers(
            0, 255, (lb.resized_height, SIZE, 3), dtype=np.uint8
        )
        out.append(t)
    return out


def encode_frame(enc: FrameEncoder, camera: str, seq: int, tensor: np.ndarray) -> bytes:
    """One frame record, byte for byte what the decoder sends; captured now."""
    lb = Letterbox.fit(*SOURCE, SIZE, SIZE)
    return enc.encode(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000,
        pts_s=seq / 5,
        orig_width=SOURCE[0],
        orig_height=SOURCE[1],
        shape=tensor.shape,
        layout=TensorLayout.HWC,
        scale=lb.scale,
        pad_x=lb.pad_x,
        pad_y=lb.pad_y,
        compression=Compression.NONE,
        tensor=tensor.data.cast("B"),
    )


def fill_frames(kafka: KafkaSettings, topic: str, frames: int, cameras: int) -> None:
    """Produce `frames` records round-robin over `cameras`, through the decoder's producer."""
    tensors, enc = prepared_tensors(), FrameEncoder()
    with Producer(kafka, overrides=producer_overrides(DecoderSettings(kafka=kafka))) as producer:
        for i in range(frames):
            cam = f"cam-{i % cameras:02d}"
            value = encode_frame(enc, cam, i // cameras, tensors[i % IMAGES])
            producer.produce(topic, value, key=cam, block_s=30.0)
        if producer.flush(60):
            raise RuntimeError(f"filling {topic}: records undelivered after 60 s")
    if topic_records(kafka, topic) != frames:
        raise RuntimeError(f"filling {topic}: expected {frames} records on the topic")


def topic_records(kafka: KafkaSettings, topic: str) -> int:
    """Records on a topic: the sum of its partitions' high watermarks (fresh topics start at 0)."""
    client = confluent_kafka.Consumer({**kafka.client_config(), "group.id": "cap-watermarks"})
    try:
        meta = client.list_topics(topic, timeout=10).topics[topic]
        return sum(
            client.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
            for p in meta.partitions
        )
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------
# Inferencer side


def bare_consume_process(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    batch: int,
    overrides: dict[str, Any] | None = None,
    keep_heap: bool = False,
) -> dict[str, float]:
    """`bare_consume` in a fresh process, as the inferencer runs in one: its rate and costs.

    `keep_heap`: that process first sets glibc's thresholds as the services do (`keep_freed_heap`).

    Returns `rate` (frames/s), and the minor page faults (`minflt`), CPU seconds (`cpu_s`, user
    + system) and records (`frames`) of that process while it consumed, from its first batch to its
    last (`bare_consume`). Run in the benchmark's own process, after the fill
    had produced 1.2 GB there, the same consumer read at 143-902 frames/s, where fresh processes
    read at 631-1070 a quarter of an hour later (docs/benchmarks.md): the baseline would have
    carried that process's heap rather than the consumer's own cost.
    """
    command = [sys.executable, __file__, "--bare-consume", topic, "--frames", str(frames)]
    command += ["--max-batch", str(batch), "--bootstrap", kafka.bootstrap_servers]
    command += ["--consumer-config", json.dumps(overrides or {})]
    command += ["--keep-freed-heap"] if keep_heap else []
    proc = subprocess.run(  # noqa: S603 - this very script
        command, capture_output=True, text=True, timeout=180, check=False
    )
    if proc.returncode:
        raise RuntimeError(f"bare consumer failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return figures


@dataclass(frozen=True)
class Consumed:
    """What `bare_consume` measured, from its first batch to its last."""

    rate: float  # frames/s
    frames: int  # records counted (the first batch's are not)
    cpu_s: float  # user + system CPU seconds of the process
    minflt: int  # minor page faults of the process
    window_s: float  # from the first batch to the last
    host_s: float  # the host's busy CPU seconds over that window (all processes)
    broker_s: float  # the local broker's CPU seconds over that window


def bare_consume(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    batch: int,
    overrides: dict[str, Any] | None = None,
) -> Consumed:
    """A bare confluent_kafka.Consumer reading the topic from the beginning: rate and costs.

    The client is built by framebus's `Consumer` wrapper, so its librdkafka settings (fetch sizes,
    read_committed, earliest, assignment strategy) are exactly the inferencer's (unless
    `overrides` says otherwise); the loop calls the raw client's consume() and touches only each
    value's length. Everything is counted from the first batch to the last, that first batch
    excepted, as the inferencer's rate is.
    """
    wrapper = Consumer(kafka, f"cap-bare-{uuid.uuid4().hex[:8]}", overrides)
    client = wrapper.client
    client.subscribe([topic])
    got, nbytes, first_n = 0, 0, 0
    t0 = t1 = 0.0
    start = resource.getrusage(resource.RUSAGE_SELF)  # reset at the first batch
    brokers = broker_pids()
    host0 = host_usage(brokers)
    deadline = time.monotonic() + 120
    while got < frames:
        if time.monotonic() > deadline:
            raise RuntimeError(f"bare consumer: {got} of {frames} records in 120 s")
        messages = client.consume(batch, 1.0)
        good = [m for m in messages if m.error() is None]
        if not good:
            continue
        for msg in good:
            nbytes += len(msg.value())
        if not got:
            t0, first_n = time.perf_counter(), len(good)
            start = resource.getrusage(resource.RUSAGE_SELF)
            host0 = host_usage(brokers)
        got += len(good)
        t1 = time.perf_counter()
    end = resource.getrusage(resource.RUSAGE_SELF)
    host1 = host_usage(brokers)
    wrapper.close()
    assert nbytes > 1_200_000 * frames, nbytes
    return Consumed(
        rate=(got - first_n) / (t1 - t0),
        frames=got - first_n,
        cpu_s=end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime,
        minflt=end.ru_minflt - start.ru_minflt,
        window_s=t1 - t0,
        host_s=host1[0] - host0[0],
        broker_s=host1[1] - host0[1],
    )


@dataclass(frozen=True)
class Drain:
    """What one `framebus inferencer` drain did, read back from its detections topic."""

    rate: float
    records: int
    by_status: dict[str, int]
    distinct_frames: int
    boxes: int
    first_batch: int
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


def inferencer_command() -> list[str]:
    """`framebus inferencer` of this environment."""
    script = Path(sys.executable).with_name("framebus")
    if script.exists():
        return [str(script), "inferencer"]
    return [sys.executable, "-m", "framebus_tools.cli", "inferencer"]


def inferencer_env(
    kafka: KafkaSettings, names: TopicSettings, model: Path, max_batch: int
) -> dict[str, str]:
    """The drain's settings: a fresh group (it starts at the earliest offset), no staleness."""
    return {
        **os.environ,
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "FRAMEBUS_FRAMES_TOPIC": names.frames_topic,
        "FRAMEBUS_DETECTIONS_TOPIC": names.detections_topic,
        "FRAMEBUS_DEADLETTER_TOPIC": names.deadletter_topic,
        "FRAMEBUS_MODEL_PATH": str(model),
        "FRAMEBUS_MAX_BATCH": str(max_batch),
        "FRAMEBUS_CONSUMER_GROUP": f"cap-fb-{uuid.uuid4().hex[:8]}",
        # The frames were captured seconds before the drain: measure throughput, not staleness.
        "FRAMEBUS_MAX_FRAME_AGE_MS": "600000",
        "FRAMEBUS_STOP_AFTER_IDLE_S": "3",
        "FRAMEBUS_PROVIDERS": "cpu",
        # As with a GPU provider (what `auto` does there): the engine's CPU threads do not spin
        # between runs, so the cores stay with Kafka and the pipeline's other stages.
        "FRAMEBUS_INTRA_OP_SPINNING": "off",
        "FRAMEBUS_LOG_LEVEL": "warning",
    }


CPU_SAMPLE_S = 0.05
CORES = os.cpu_count() or 1
# (wall-clock s, the process's user + system CPU s, its minor page faults, the host's busy CPU s,
# the local broker's CPU s)
UsageSamples = list[tuple[float, float, int, float, float]]


def process_usage(pid: int) -> tuple[float, int] | None:
    """User + system CPU seconds and minor page faults of a running process (Linux /proc).

    None once it is gone.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[7])


def broker_pids() -> list[int]:
    """The local Kafka brokers' processes (`framebus kafka start` runs kafka.Kafka); [] if none."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if b"kafka.Kafka" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def host_usage(brokers: list[int]) -> tuple[float, float]:
    """Busy CPU seconds of the whole host (all cores, not idle or iowait) and of the brokers.

    Both are counters: only the difference between two readings means anything.

    With each process's own CPU, this says what else ran during a window: a run slowed by other
    work on the host shows more of it (the broker's share, and the rest) than its neighbours.
    """
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # Busy is what was not idle (fields 3 and 4, idle and iowait, which the kernel measures exactly
    # where it samples the busy states by timer tick), steal included: time the host's other
    # tenants took.
    idle = (fields[3] + fields[4]) / os.sysconf("SC_CLK_TCK")
    busy = time.time() * CORES - idle
    broker = 0.0
    for pid in brokers:
        usage = process_usage(pid)
        broker += usage[0] if usage is not None else 0.0
    return busy, broker


def usage_between(samples: UsageSamples, t0: float, t1: float) -> tuple[float, float, float, float]:
    """CPU s, minor faults, host busy CPU s and broker CPU s between t0 and t1, interpolated.

    nan for all if the samples do not cover that window.
    """
    if len(samples) < 2 or not samples[0][0] <= t0 <= t1 <= samples[-1][0]:
        nan = float("nan")
        return nan, nan, nan, nan
    times = [s[0] for s in samples]

    def between(column: int) -> float:
        values = [s[column] for s in samples]
        return float(np.interp(t1, times, values) - np.interp(t0, times, values))

    return between(1), between(2), between(3), between(4)


def run_inferencer(
    env: dict[str, str], log_path: Path, profile: Path | None, timeout_s: float = 300
) -> tuple[int, UsageSamples]:
    """Run the inferencer until it stops on idle; optionally under `py-spy record`.

    Returns its exit code and its CPU and page faults sampled every 50 ms (none under py-spy,
    whose child it is).
    """
    command = inferencer_command()
    if profile is not None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        command = [py_spy, "record", "--format", "raw", "-o", str(profile), "--", *command]
    samples: UsageSamples = []
    brokers = broker_pids()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own entry point
            command, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            if time.monotonic() > deadline:
                proc.kill()
                raise subprocess.TimeoutExpired(command, timeout_s)
            usage = process_usage(proc.pid) if profile is None else None
            if usage is not None:
                samples.append((time.time(), *usage, *host_usage(brokers)))
            time.sleep(CPU_SAMPLE_S)
    return proc.returncode, samples


def read_detections(kafka: KafkaSettings, topic: str, frames: int) -> list[Any]:
    """Every detections record on the topic (stops after 5 s without one)."""
    client = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"cap-read-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    client.subscribe([topic])
    out: list[Any] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < (5.0 if len(out) >= frames else 20.0):
        got = [m for m in client.consume(500, 0.5) if m.error() is None]
        if got:
            out += got
            idle_since = time.monotonic()
    client.close()
    return out


def framebus_drain(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    frames: int,
    max_batch: int,
    workdir: Path,
    profile: Path | None = None,
) -> Drain:
    """`framebus inferencer` draining the topic; frames/s from its detections' timestamps."""
    log_path = workdir / f"inferencer-{names.frames_topic}.log"
    code, usage = run_inferencer(inferencer_env(kafka, names, model, max_batch), log_path, profile)
    messages = read_detections(kafka, names.detections_topic, frames)
    codec = DetectionsCodec()
    dets = [(m.timestamp()[1], codec.decode(m.value())) for m in messages]
    if not dets:
        raise RuntimeError(f"no detections; inferencer log {log_path}:\n{log_path.read_text()}")
    dets.sort(key=lambda d: d[0])
    by_status: dict[str, int] = {}
    for _, d in dets:
        by_status[d.status.value] = by_status.get(d.status.value, 0) + 1
    # CreateTime is set when the publish thread produces a record: the first batch's records
    # mark the end of start-up and of the first batch; each later record is one frame through.
    first_ms, last_ms = dets[0][0], dets[-1][0]
    first_batch = max(1, dets[0][1].batch_size)
    span_s = max(last_ms - first_ms, 1) / 1000
    counted = len(dets) - first_batch
    cpu_s, faults, host_s, broker_s = usage_between(usage, first_ms / 1000, last_ms / 1000)
    broker_cores, rest_cores = others(host_s, cpu_s, broker_s, span_s)
    return Drain(
        rate=counted / span_s,
        records=len(dets),
        by_status=by_status,
        distinct_frames=len({(d.camera_id, d.seq) for _, d in dets}),
        boxes=sum(len(d.boxes) for _, d in dets),
        first_batch=first_batch,
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
) -> tuple[tuple[dict[str, float], dict[str, float]], Drain]:
    """One run on a fresh topic: fill it; bare consumer, framebus drain, bare consumer again.

    The baseline before and after the drain, averaged, cancels a linear drift of the machine's
    speed (other jobs starting or ending) that one fixed order would book to either side.
    """
    names = fresh_topics(kafka, args.partitions)
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        # The kernel writes the fill's 1.2 GB back about 30 s later, inside some later drain,
        # unless it is written now.
        os.sync()

        # The baseline's process keeps freed heap as the inferencer's does (framebus.malloc), so
        # the ratio compares the two paths, not two heap policies.
        def bare() -> dict[str, float]:
            return bare_consume_process(
                kafka, names.frames_topic, args.frames, args.max_batch, keep_heap=True
            )

        before = bare()
        result = framebus_drain(kafka, names, model, args.frames, args.max_batch, workdir)
        after = bare()
    finally:
        delete_topics(kafka, names)
    return (before, after), result


def cpu_ms_per_frame(consumed: dict[str, float]) -> float:
    """A bare consumer process's CPU milliseconds per frame it counted."""
    return consumed["cpu_s"] * 1000 / consumed["frames"]


def faults_per_frame(consumed: dict[str, float]) -> float:
    """A bare consumer process's minor page faults per frame it counted."""
    return consumed["minflt"] / consumed["frames"]


def others(host_s: float, own_s: float, broker_s: float, window_s: float) -> tuple[float, float]:
    """The broker's and the rest of the host's CPU over a window, in cores.

    The rest is the host's busy CPU less the measured process's own (`own_s`) and the broker's.
    """
    return broker_s / window_s, (host_s - own_s - broker_s) / window_s


def others_cores(consumed: dict[str, float]) -> tuple[float, float]:
    """The broker's and the rest of the host's CPU over a bare consumer's window, in cores."""
    return others(consumed["host_s"], consumed["cpu_s"], consumed["broker_s"], consumed["window_s"])


def inferencer_side(args: argparse.Namespace, kafka: KafkaSettings, workdir: Path) -> Side:
    """`runs` runs of `inferencer_run`; print each run's figures."""
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
        base = (before["rate"] + after["rate"]) / 2
        base_cpu = (cpu_ms_per_frame(before) + cpu_ms_per_frame(after)) / 2
        note = result.note(args.frames)
        if run < 0:
            print(
                f"{warm_up_label(run, args.warm_up):>3} {base:>33.1f} {result.rate:>13.1f} "
                f"{result.rate / base:>6.2f}  warm-up, not counted",
                flush=True,
            )
            continue
        side.base.append(base)
        side.framebus.append(result.rate)
        side.base_cpu.append(base_cpu)
        side.framebus_cpu.append(result.cpu_ms_per_frame)
        side.notes.append(note)
        rates = f"{base:.1f} ({before['rate']:.1f}/{after['rate']:.1f})"
        base_faults = (faults_per_frame(before) + faults_per_frame(after)) / 2
        side.base_faults.append(base_faults)
        side.framebus_faults.append(result.faults_per_frame)
        side.framebus_gaps_ms.append(result.longest_gap_ms)
        (broker_b, rest_b), (broker_a, rest_a) = others_cores(before), others_cores(after)
        side.base_broker.append((broker_b + broker_a) / 2)
        side.base_rest.append((rest_b + rest_a) / 2)
        side.framebus_broker.append(result.broker_cores)
        side.framebus_rest.append(result.rest_cores)
        cpu = f"{base_cpu:.2f}, {result.cpu_ms_per_frame:.2f}"
        faults = f"{base_faults:.0f}, {result.faults_per_frame:.0f}"
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
    """One more drain under py-spy (not counted in the figures): where the inferencer's time goes."""
    names = fresh_topics(kafka, args.partitions)
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        result = framebus_drain(
            kafka, names, model, args.frames, args.max_batch, workdir, profile=args.profile
        )
    finally:
        delete_topics(kafka, names)
    print(f"profiled drain (py-spy, not counted): {result.rate:.1f} f/s -> {args.profile}")


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
) -> None:
    """A camera worker's hand-over, as `CameraWorker._hand_over` does it: letterbox, queue."""
    pool: list[LetterboxBuffer] = [LetterboxBuffer(SIZE, SIZE) for _ in range(buffers)]
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
        )
        # BLOCK: every frame is published, as the decoder does for a file read as fast as it can.
        publisher.submit(pending, BackpressurePolicy.BLOCK, stop)


def framebus_publish(
    kafka: KafkaSettings, topic: str, frames: list[Any], total: int, cameras: int
) -> float:
    """Frames/s through letterbox + FramePublisher (encode, produce) to the last delivery."""
    settings = DecoderSettings(kafka=kafka)
    producer = decoder_producer(kafka)
    stats = DecoderStats()
    publisher = FramePublisher(producer, topic, stats, settings.max_pending_frames)
    publisher.start()
    stop = threading.Event()
    per_camera = [total // cameras + (c < total % cameras) for c in range(cameras)]
    threads = [
        threading.Thread(
            target=camera_thread,
            args=(f"cam-{c:02d}", frames, n, publisher, settings.max_pending_frames + 2, stop),
        )
        for c, n in enumerate(per_camera)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    undelivered = publisher.close(60)
    elapsed = time.perf_counter() - t0
    delivered = stats.total("delivered")
    if undelivered or delivered != total:
        raise RuntimeError(f"framebus publisher: {delivered} of {total} delivered")
    return total / elapsed


def bare_publish(
    kafka: KafkaSettings, topic: str, records: list[tuple[str, bytes]], total: int
) -> float:
    """Frames/s of a bare confluent_kafka.Producer (same config) producing ready record bytes."""
    client = decoder_producer(kafka).client  # the raw client, built with the decoder's config
    t0 = time.perf_counter()
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
    return total / (time.perf_counter() - t0)


def decoder_side(args: argparse.Namespace, kafka: KafkaSettings) -> Side:
    """Bare producer and framebus's publishing path in alternating rounds, `runs` times."""
    frames = predecoded_frames(8)
    enc, buf = FrameEncoder(), LetterboxBuffer(SIZE, SIZE)
    records = []
    for c in range(args.cameras):
        letterbox_frame(frames[c % len(frames)], buf)
        cam = f"cam-{c:02d}"
        records.append((cam, encode_frame(enc, cam, 0, buf.hwc)))
    side = Side()
    print(
        f"\n== decoder side: {args.frames} pre-decoded 1920x1080 yuv420p frames, "
        f"{args.cameras} camera threads, {args.partitions} partitions, "
        f"{args.rounds} alternating rounds per run"
    )
    print(f"{'run':>3} {'bare producer f/s':>18} {'framebus f/s':>13} {'ratio':>6}")
    rounds = max(1, args.rounds)
    chunk = [args.frames // rounds + (r < args.frames % rounds) for r in range(rounds)]
    for run in range(-args.warm_up, args.runs):
        # The broker's ingest on a shared machine swings by 2-4x within seconds (page-cache
        # writeback of 1.2 GB per side), so the two sides take turns in short rounds, in
        # alternating order, and each side's rate is its frames over its summed time.
        topics = [fresh_topics(kafka, args.partitions) for _ in range(2)]
        spent = [0.0, 0.0]
        try:
            for r, n in enumerate(chunk):
                for which in (0, 1) if r % 2 == 0 else (1, 0):
                    if which == 0:
                        spent[0] += n / bare_publish(kafka, topics[0].frames_topic, records, n)
                    else:
                        spent[1] += n / framebus_publish(
                            kafka, topics[1].frames_topic, frames, n, args.cameras
                        )
            counts = [topic_records(kafka, t.frames_topic) for t in topics]
        finally:
            for t in topics:
                delete_topics(kafka, t)
        base, fb = args.frames / spent[0], args.frames / spent[1]
        note = "" if counts == [args.frames] * 2 else f"records on the topics: {counts}"
        if run < 0:
            print(
                f"{warm_up_label(run, args.warm_up):>3} {base:>18.1f} {fb:>13.1f} {fb / base:>6.2f}  "
                "warm-up, not counted",
                flush=True,
            )
            continue
        side.base.append(base)
        side.framebus.append(fb)
        side.notes.append(note)
        print(f"{run + 1:>3} {base:>18.1f} {fb:>13.1f} {fb / base:>6.2f}  {note}", flush=True)
    return side


# ---------------------------------------------------------------------------------------------


def warm_up_label(run: int, warm_up: int) -> str:
    """`w1`, `w2`, ... for the warm-up runs (run -warm_up up to -1)."""
    return f"w{run + warm_up + 1}"


def summary(name: str, base_name: str, side: Side) -> dict[str, Any]:
    """Print and return the medians and the goal verdict of one side."""
    ratio = statistics.median(side.ratios())
    base, fb = statistics.median(side.base), statistics.median(side.framebus)
    verdict = "met" if ratio >= GOAL else "MISSED"
    print(
        f"{name}: median {base_name} {base:.1f} f/s, framebus {fb:.1f} f/s; "
        f"ratio {ratio:.3f} (median of per-run {', '.join(f'{r:.2f}' for r in side.ratios())}); "
        f"goal >= {GOAL:.2f}: {verdict}"
    )
    cpu: dict[str, float] = {}
    if side.base_cpu:
        cpu = {
            "median_baseline_cpu_ms_per_frame": statistics.median(side.base_cpu),
            "median_framebus_cpu_ms_per_frame": statistics.median(side.framebus_cpu),
        }
        cpu["median_baseline_faults_per_frame"] = statistics.median(side.base_faults)
        cpu["median_framebus_faults_per_frame"] = statistics.median(side.framebus_faults)
        print(
            f"{name}: median CPU per frame, {base_name} "
            f"{cpu['median_baseline_cpu_ms_per_frame']:.2f} ms, framebus "
            f"{cpu['median_framebus_cpu_ms_per_frame']:.2f} ms (each process's own, over the "
            "rate's window); minor page faults per frame "
            f"{cpu['median_baseline_faults_per_frame']:.0f} and "
            f"{cpu['median_framebus_faults_per_frame']:.0f}"
        )
        print(
            f"{name}: what else ran over those windows, median cores: the broker "
            f"{statistics.median(side.base_broker):.2f} ({base_name}) and "
            f"{statistics.median(side.framebus_broker):.2f} (framebus), the rest of the host "
            f"{statistics.median(side.base_rest):.2f} and {statistics.median(side.framebus_rest):.2f}"
        )
    return {
        **cpu,
        "baseline_cpu_ms_per_frame": side.base_cpu,
        "framebus_cpu_ms_per_frame": side.framebus_cpu,
        "baseline_faults_per_frame": side.base_faults,
        "framebus_faults_per_frame": side.framebus_faults,
        "framebus_longest_gap_ms": side.framebus_gaps_ms,
        "baseline_broker_cores": side.base_broker,
        "framebus_broker_cores": side.framebus_broker,
        "baseline_rest_cores": side.base_rest,
        "framebus_rest_cores": side.framebus_rest,
        "baseline_fps": side.base,
        "framebus_fps": side.framebus,
        "ratios": side.ratios(),
        "notes": side.notes,
        "median_baseline_fps": base,
        "median_framebus_fps": fb,
        "median_ratio": ratio,
        "goal_met": ratio >= GOAL,
    }


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    """--bootstrap, defaulting to FRAMEBUS_BOOTSTRAP_SERVERS or the test broker."""
    parser.add_argument(
        "--bootstrap", default=os.environ.get("FRAMEBUS_BOOTSTRAP_SERVERS", "127.0.0.1:29092")
    )


def print_header() -> dict[str, Any]:
    """Print the command and the machine with the versions that matter here; return the machine."""
    machine: dict[str, Any] = machine_info("CPUExecutionProvider")
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores; {machine['date']}; "
        f"Python {machine['python']}; onnxruntime {ort.__version__} (CPUExecutionProvider); "
        f"confluent-kafka {confluent_kafka.__version__}, librdkafka "
        f"{confluent_kafka.libversion()[0]}; PyAV {av.__version__}; OpenCV {cv2.__version__}"
    )
    return machine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=960, help="frames per run (>= 960)")
    parser.add_argument("--cameras", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
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
    add_bootstrap_argument(parser)
    parser.add_argument("--side", choices=("inferencer", "decoder", "both"), default="both")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="after the runs, one more drain under `py-spy record --format raw` to this file",
    )
    parser.add_argument("--bare-consume", metavar="TOPIC", help=argparse.SUPPRESS)
    parser.add_argument("--consumer-config", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--keep-freed-heap", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    if args.bare_consume:  # the baseline's own process (bare_consume_process)
        overrides = json.loads(args.consumer_config)
        if args.keep_freed_heap:
            keep_freed_heap(MALLOC_TRIM_THRESHOLD_BYTES)
        got = bare_consume(kafka, args.bare_consume, args.frames, args.max_batch, overrides)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps({**dataclasses.asdict(got), "maxrss_mb": peak_mb}))
        return 0
    machine = print_header()
    results: dict[str, Any] = {"command": sys.argv, "machine": machine, "args": vars(args)}
    sides: dict[str, tuple[str, Side]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.side in ("inferencer", "both"):
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
