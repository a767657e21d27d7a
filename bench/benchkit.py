"""What the benchmarks and diagnostics share, so that none imports another.

The command and machine header, the broker argument, fresh topics filled with frame records and
deleted after, a bare consumer in a process of its own (the inferencer side's baseline), the
`framebus inferencer` subprocess, CPU readings from /proc, and medians of per-run ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import av
import confluent_kafka
import cv2
import numpy as np
import numpy.typing as npt
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from framebus.codec import DetectionsCodec, FrameCodec
from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.reader import Reader
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.letterbox import Letterbox
from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, keep_freed_heap
from framebus.messages import (
    Compression,
    Detections,
    Frame,
    FrameStatus,
    PixelFormat,
    TensorLayout,
)
from framebus.pixels import i420_nbytes, rgb_to_i420
from framebus.topology import INFERENCE_TOPICS, Sizing, Topic, TopicSettings, pipeline_specs
from framebus_decoder.service import producer_overrides
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.wire import FrameEncoder
from framebus_tools.perf.loadtest import end_offsets
from framebus_tools.perf.tune import machine_info
from framebus_tools.process import ServiceProcess

SIZE = 640  # the model input every benchmark letterboxes to
SOURCE = (1920, 1080)  # the camera frame the filled records say they came from
IMAGES = 4  # distinct prepared tensors, reused: content does not change any cost measured here
CPU_SAMPLE_S = 0.05  # how often a running process's CPU is read from /proc
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1
U8 = npt.NDArray[np.uint8]


# ---------------------------------------------------------------------------------------------
# Header, arguments, medians


def program() -> str:
    """How this program is started, as a reader would type it: `python -m bench.x`."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    start = ["-m", spec.name] if spec is not None else [sys.argv[0]]
    return " ".join([Path(sys.executable).name, *start])


def command_line() -> str:
    """This process's command line, as a reader would type it."""
    return " ".join([program(), *sys.argv[1:]])


def print_header(provider: str | None = "CPUExecutionProvider") -> dict[str, Any]:
    """Print the command and the machine with the versions that matter here; return the machine.

    `provider`: the ONNX Runtime execution provider the figures use (None: no engine runs).
    """
    machine = machine_info(provider or "-")
    machine["confluent_kafka"] = confluent_kafka.__version__
    machine["librdkafka"] = confluent_kafka.libversion()[0]
    print("command:", command_line())
    print(
        f"machine: {machine['cpu']}, {machine['cores']} cores; {machine['date']}; "
        f"Python {machine['python']}; onnxruntime {machine['onnxruntime']}"
        f"{f' ({provider})' if provider else ''}; "
        f"confluent-kafka {machine['confluent_kafka']}, librdkafka {machine['librdkafka']}; "
        f"PyAV {av.__version__}; OpenCV {cv2.__version__}",
        flush=True,
    )
    return machine


def parser_for(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser whose --help shows the module's docstring (what, goal, command)."""
    return argparse.ArgumentParser(
        prog=program(), description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def runs_from_command_line(doc: str | None, default: int = 9) -> int:
    """`--runs` (timings per figure, their median) of a benchmark that takes nothing else."""
    parser = parser_for(doc)
    parser.add_argument("--runs", type=int, default=default, help="timings per figure (median)")
    runs: int = parser.parse_args().runs
    return runs


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    """--bootstrap, defaulting to FRAMEBUS_BOOTSTRAP_SERVERS or the test broker."""
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("FRAMEBUS_BOOTSTRAP_SERVERS", "127.0.0.1:29092"),
        help="Kafka bootstrap servers (default: FRAMEBUS_BOOTSTRAP_SERVERS or 127.0.0.1:29092)",
    )


def ratios(subject: Sequence[float], base: Sequence[float]) -> list[float]:
    """subject / baseline of each run (both lists in run order)."""
    return [s / b for s, b in zip(subject, base, strict=True)]


def runs_text(values: Sequence[float]) -> str:
    """'0.81, 0.77, 0.90': each run's figure, for the line that gives their median."""
    return ", ".join(f"{v:.2f}" for v in values)


def verdict(value: float, goal: float, *, at_most: bool = False) -> str:
    """'goal >= 0.80: met' (or `<=` with `at_most`, or MISSED)."""
    met = value <= goal if at_most else value >= goal
    return f"goal {'<=' if at_most else '>='} {goal:g}: {'met' if met else 'MISSED'}"


def print_median_ratio(label: str, per_run: Sequence[float], goal: float | None = None) -> float:
    """Print the median of per-run ratios, the runs, and the goal's verdict; return the median."""
    ratio = statistics.median(per_run)
    goal_text = f"; {verdict(ratio, goal)}" if goal is not None else ""
    print(f"{label}: ratio {ratio:.3f} (median of per-run {runs_text(per_run)}){goal_text}")
    return ratio


# ---------------------------------------------------------------------------------------------
# Topics and frame records


def fresh_topics(
    kafka: KafkaSettings,
    partitions: int,
    prefix: str = "bench",
    topics: Sequence[Topic] = INFERENCE_TOPICS,
) -> TopicSettings:
    """Fresh names for every topic, and `topics` of them created as `framebus topics` does."""
    names = TopicSettings.with_prefix(f"{prefix}-{uuid.uuid4().hex[:10]}")
    sizing = Sizing(partitions, partitions, alerts_partitions=1, replication_factor=1)
    ensure_topics(kafka, pipeline_specs(names, sizing, topics))
    return names


def delete_topics(kafka: KafkaSettings, names: TopicSettings | Sequence[str]) -> None:
    """Drop a run's topics (960 frames are 1.2 GB of broker log); ones never created are fine."""
    admin = AdminClient(kafka.client_config())
    topics = [names.name(t) for t in Topic] if isinstance(names, TopicSettings) else list(names)
    for future in admin.delete_topics(topics, request_timeout=30).values():
        with contextlib.suppress(confluent_kafka.KafkaException):  # already gone: nothing to do
            future.result(30)


def prepared_tensors() -> list[U8]:
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


def encode_frame(
    enc: FrameEncoder,
    camera: str,
    seq: int,
    tensor: U8,
    capture_ts_us: int | None = None,
    pixel_format: PixelFormat = PixelFormat.RGB,
) -> bytes:
    """One frame record, byte for byte what the decoder sends; captured now unless given.

    `tensor` is an HWC RGB picture; an I420 record carries its planes, as the decoder's would.
    """
    lb = Letterbox.fit(*SOURCE, SIZE, SIZE)
    i420 = pixel_format is PixelFormat.I420
    return enc.encode(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000 if capture_ts_us is None else capture_ts_us,
        pts_s=seq / 5,
        orig_width=SOURCE[0],
        orig_height=SOURCE[1],
        shape=tensor.shape[:2] if i420 else tensor.shape,
        layout=TensorLayout.CHW if i420 else TensorLayout.HWC,
        scale=lb.scale,
        pad_x=lb.pad_x,
        pad_y=lb.pad_y,
        compression=Compression.NONE,
        tensor=rgb_to_i420(tensor).data if i420 else tensor.data.cast("B"),
        pixel_format=pixel_format,
    )


def fill_frames(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    cameras: int,
    pixel_format: PixelFormat = PixelFormat.RGB,
) -> None:
    """Produce `frames` records round-robin over `cameras`, through the decoder's producer."""
    tensors, enc = prepared_tensors(), FrameEncoder()
    with Producer(kafka, overrides=producer_overrides(DecoderSettings(kafka=kafka))) as producer:
        for i in range(frames):
            cam = f"cam-{i % cameras:02d}"
            value = encode_frame(
                enc, cam, i // cameras, tensors[i % IMAGES], pixel_format=pixel_format
            )
            producer.produce(topic, value, key=cam, block_s=30.0)
        if producer.flush(60):
            raise RuntimeError(f"filling {topic}: records undelivered after 60 s")
    if end_offsets(kafka, topic) != frames:
        raise RuntimeError(f"filling {topic}: expected {frames} records on the topic")


# ---------------------------------------------------------------------------------------------
# CPU from /proc (Linux)


def process_usage(pid: int) -> tuple[float, int] | None:
    """User + system CPU seconds and minor page faults of a running process; None once gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) * TICK_S, int(fields[7])


def process_tree_usage(pid: int) -> tuple[float, int] | None:
    """CPU seconds and minor page faults of a process and its children; None once it is gone.

    `framebus inferencer --workers N` is a supervisor and N worker processes: this is their CPU
    together. A child that ended and was reaped stays counted, in the parent's cutime/cstime.
    """
    own = _stat_fields(pid)
    if own is None:
        return None
    cpu = (int(own[11]) + int(own[12]) + int(own[13]) + int(own[14])) * TICK_S
    faults = int(own[7]) + int(own[8])
    children: set[int] = set()
    with contextlib.suppress(OSError):  # the kernel lists each thread's children (Linux 3.5+)
        for task in Path(f"/proc/{pid}/task").iterdir():
            children.update(int(c) for c in (task / "children").read_text().split())
    for child in children:
        usage = process_usage(child)
        if usage is not None:
            cpu, faults = cpu + usage[0], faults + usage[1]
    return cpu, faults


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (which may hold spaces); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def listening_pids(port: int) -> list[int]:
    """The processes with a socket listening on TCP `port` (any address); [] if none is seen."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                    inodes.add(f"socket:[{cols[9]}]")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                pids.append(int(entry.name))
    return pids


def broker_pids(bootstrap: str | None = None) -> list[int]:
    """The local Kafka broker's process: the one serving `bootstrap`'s port when one does.

    Other brokers on the host (other suites' and engineers') are left out; without `bootstrap`,
    or when no process is seen listening on its port, every `kafka.Kafka` process (`framebus kafka
    start` runs that class) is counted.
    """
    if bootstrap:
        host_port = bootstrap.split(",")[0]
        serving = listening_pids(int(host_port.rsplit(":", 1)[1]))
        if serving:
            return serving
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if b"kafka.Kafka" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def host_usage(brokers: list[int]) -> tuple[float, float]:
    """Busy CPU seconds of the whole host (all cores) and of the brokers: counters to subtract.

    Busy is wall time x cores less /proc/stat's idle and iowait, which the kernel measures
    exactly (the busy states are sampled by timer tick), so time stolen by other tenants counts.
    """
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = time.time() * CORES - (fields[3] + fields[4]) * TICK_S
    broker = 0.0
    for pid in brokers:
        usage = process_usage(pid)
        broker += usage[0] if usage is not None else 0.0
    return busy, broker


def others_cores(
    host_s: float, own_s: float, broker_s: float, window_s: float
) -> tuple[float, float]:
    """The broker's and the rest of the host's CPU over a window, in cores.

    The rest is the host's busy CPU less the measured process's own (`own_s`) and the broker's.
    """
    return broker_s / window_s, (host_s - own_s - broker_s) / window_s


# ---------------------------------------------------------------------------------------------
# The bare consumer: the inferencer side's baseline


@dataclass(frozen=True)
class Consumed:
    """What a bare consumer measured, from its first batch to its last (that first excepted)."""

    rate: float  # frames/s
    frames: int  # records counted
    cpu_s: float  # user + system CPU seconds of the process
    minflt: int  # minor page faults of the process
    window_s: float  # from the first batch to the last
    host_s: float  # the host's busy CPU seconds over that window (all processes)
    broker_s: float  # the local broker's CPU seconds over that window
    first_wall_s: float  # the window's ends, wall-clock (time.time()) seconds
    last_wall_s: float
    maxrss_mb: float  # the process's peak resident memory

    @property
    def cpu_ms_per_frame(self) -> float:
        return self.cpu_s * 1000 / self.frames

    @property
    def faults_per_frame(self) -> float:
        return self.minflt / self.frames

    def others(self) -> tuple[float, float]:
        """The broker's and the rest of the host's CPU over the window, in cores."""
        return others_cores(self.host_s, self.cpu_s, self.broker_s, self.window_s)


def bare_consume(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    batch: int,
    overrides: dict[str, Any],
    stage: bool = False,
    relay: str | None = None,
    partitions: Sequence[int] | None = None,
) -> Consumed:
    """A bare confluent_kafka.Consumer reading the topic from the beginning: rate and costs.

    The client is built by framebus's `Consumer` wrapper, so its librdkafka settings (fetch sizes,
    read_committed, earliest, assignment strategy) are the inferencer's unless `overrides` says
    otherwise; the loop calls the raw client's consume() and touches only each value's length.
    `stage`: it also copies each value into its row of one preallocated `batch`-row buffer, the
    one copy a batched model input needs (its rows written once before the first record).
    `relay` (a topic): it also does per record what any service answering each frame with one
    record must (`relay_batch`), with framebus's codecs and a raw producer of framebus's settings.
    `partitions`: it reads only these, assigned (no group join), so several such consumers in
    their own processes split a topic as a group's members would, without its rebalances.
    """
    wrapper = Consumer(kafka, f"bench-bare-{uuid.uuid4().hex[:8]}", overrides)
    client = confluent_kafka.Consumer(wrapper.config)
    if partitions is None:
        client.subscribe([topic])
    else:
        first = confluent_kafka.OFFSET_BEGINNING
        client.assign([confluent_kafka.TopicPartition(topic, p, first) for p in partitions])
    relayed = None
    if relay is not None:
        producer = confluent_kafka.Producer(Producer(kafka).config)
        codecs = (FrameCodec(), DetectionsCodec())  # made once: each parses its schema
        relayed = functools.partial(relay_batch, client, producer, relay, codecs)
    rows: U8 | None = None
    if stage or relayed is not None:  # the largest record, RGB pixels plus a head, fits a row
        rows = np.ones((batch, SIZE * SIZE * 3 + 4096), np.uint8)
    got, nbytes, first_n = 0, 0, 0
    t0 = t1 = first_wall = 0.0
    start = resource.getrusage(resource.RUSAGE_SELF)  # reset at the first batch
    brokers = broker_pids(kafka.bootstrap_servers)
    host0 = host_usage(brokers)
    deadline = time.monotonic() + 120
    while got < frames:
        if time.monotonic() > deadline:
            raise RuntimeError(f"bare consumer: {got} of {frames} records in 120 s")
        good = [m for m in client.consume(batch, 1.0) if m.error() is None]
        if not good:
            continue
        nbytes += sum(len(m.value() or b"") for m in good)
        if relayed is not None and rows is not None:
            relayed(rows, good)
        elif rows is not None:
            for row, m in zip(rows, good, strict=False):
                value = np.frombuffer(m.value() or b"", np.uint8)
                row[: len(value)] = value
        if not got:
            t0, first_n, first_wall = time.perf_counter(), len(good), time.time()
            start = resource.getrusage(resource.RUSAGE_SELF)
            host0 = host_usage(brokers)
        got += len(good)
        t1 = time.perf_counter()
    end = resource.getrusage(resource.RUSAGE_SELF)
    host1 = host_usage(brokers)
    last_wall = time.time() - (time.perf_counter() - t1)
    wrapper.close()
    if nbytes < i420_nbytes(SIZE, SIZE) * frames:  # the smaller of the two frame formats
        raise RuntimeError(f"bare consumer: {nbytes} bytes is not {frames} frame records")
    return Consumed(
        rate=(got - first_n) / (t1 - t0),
        frames=got - first_n,
        cpu_s=end.ru_utime + end.ru_stime - start.ru_utime - start.ru_stime,
        minflt=end.ru_minflt - start.ru_minflt,
        window_s=t1 - t0,
        host_s=host1[0] - host0[0],
        broker_s=host1[1] - host0[1],
        first_wall_s=first_wall,
        last_wall_s=last_wall,
        maxrss_mb=end.ru_maxrss / 1024,
    )


def no_boxes(frame: Frame, batch_size: int, partition: int, offset: int) -> Detections:
    """The detections record of a frame in which nothing was found."""
    return Detections(
        camera_id=frame.camera_id,
        seq=frame.seq,
        capture_ts_us=frame.capture_ts_us,
        status=FrameStatus.INFERRED,
        model_name="bench",
        model_version="1",
        orig_width=frame.orig_width,
        orig_height=frame.orig_height,
        batch_size=batch_size,
        frame_partition=partition,
        frame_offset=offset,
    )


def relay_batch(
    consumer: Any,
    producer: Any,
    topic: str,
    codecs: tuple[FrameCodec, DetectionsCodec],
    rows: U8,
    batch: list[Any],
) -> None:
    """What any service answering each frame record with one record must do, and no more.

    Per record: decode its head, copy its pixels into its row of the batch input, encode a
    detections record (no boxes) and produce it keyed by camera; per batch: wait for the
    acknowledgements, then commit the offsets (asynchronously), as at-least-once requires.
    """
    frames, codec = codecs
    for row, m in zip(rows, batch, strict=False):
        frame = frames.decode_view(m.value() or b"")
        pixels = np.frombuffer(frame.tensor, np.uint8)
        row[: len(pixels)] = pixels
        result = no_boxes(frame, len(batch), m.partition(), m.offset())
        producer.produce(topic, codec.encode(result), frame.camera_id)
    producer.flush(30)
    consumer.commit(asynchronous=True)


def _bare_consume_child(
    bootstrap: str,
    topic: str,
    frames: int,
    batch: int,
    overrides: dict[str, Any],
    keep_heap: bool,
    stage: bool,
    relay: str | None,
    partitions: Sequence[int] | None,
    out: Connection,
) -> None:
    if keep_heap:
        keep_freed_heap(MALLOC_TRIM_THRESHOLD_BYTES)
    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    try:
        out.send(bare_consume(kafka, topic, frames, batch, overrides, stage, relay, partitions))
    except Exception as exc:  # handed to the parent, which raises it with the run's context
        out.send(f"{type(exc).__name__}: {exc}")
        raise


def bare_consume_process(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    batch: int,
    overrides: dict[str, Any] | None = None,
    keep_heap: bool = False,
    stage: bool = False,
    relay: str | None = None,
) -> Consumed:
    """`bare_consume` in a fresh process, as the inferencer runs in one (`stage`, `relay`: there).

    `keep_heap`: that process first sets glibc's thresholds as the services do (`keep_freed_heap`),
    so a ratio compares two paths, not two heap policies. Run in the benchmark's own process,
    after a fill had produced 1.2 GB there, the same consumer read 2-5x slower than in a fresh
    one: the baseline would have carried that process's heap rather than the consumer's cost.
    """
    shares = [(None, frames)]
    (got,) = bare_consume_processes(kafka, topic, shares, batch, overrides, keep_heap, stage, relay)
    return got


# Which partitions one process reads (None: the whole topic, subscribed) and how many records.
Share = tuple[Sequence[int] | None, int]


def split_shares(kafka: KafkaSettings, topic: str, processes: int) -> list[Share]:
    """The topic's partitions dealt round-robin to `processes` processes, with their records."""
    with Reader(kafka) as reader:  # a fresh topic, not transactional: a record an offset
        ends = reader.end_offsets(topic)
    parts = sorted(ends)
    dealt = [parts[i::processes] for i in range(processes)]
    return [(share, sum(ends[p] for p in share)) for share in dealt]


def bare_consume_processes(
    kafka: KafkaSettings,
    topic: str,
    shares: Sequence[Share],
    batch: int,
    overrides: dict[str, Any] | None = None,
    keep_heap: bool = False,
    stage: bool = False,
    relay: str | None = None,
) -> list[Consumed]:
    """`bare_consume_process` for each share at once, each in its own fresh process."""
    context = multiprocessing.get_context("spawn")
    started = []
    for partitions, frames in shares:
        receiver, sender = context.Pipe(duplex=False)
        args = (
            kafka.bootstrap_servers,
            topic,
            frames,
            batch,
            overrides or {},
            keep_heap,
            stage,
            relay,
            partitions,
            sender,
        )
        proc = context.Process(target=_bare_consume_child, args=args, daemon=True)
        proc.start()
        sender.close()
        started.append((proc, receiver))
    results = []
    for proc, receiver in started:
        try:
            got: Consumed | str = receiver.recv() if receiver.poll(180) else "no result in 180 s"
        except EOFError:
            got = "exited without a result"
        finally:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        if not isinstance(got, Consumed):
            raise RuntimeError(f"bare consumer process (exit code {proc.exitcode}): {got}")
        results.append(got)
    return results


# ---------------------------------------------------------------------------------------------
# `framebus inferencer` as a subprocess

# (wall-clock s, the process's user + system CPU s, its minor page faults, the host's busy CPU s,
# the local broker's CPU s)
UsageSamples = list[tuple[float, float, int, float, float]]


def inferencer_env(
    kafka: KafkaSettings, names: TopicSettings, model: Path, max_batch: int
) -> dict[str, str]:
    """A drain's settings: a fresh group (it starts at the earliest offset), no staleness."""
    return {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_MODEL_PATH": str(model),
        "FRAMEBUS_MAX_BATCH": str(max_batch),
        "FRAMEBUS_CONSUMER_GROUP": f"bench-fb-{uuid.uuid4().hex[:8]}",
        # The frames were captured seconds before the drain: measure throughput, not staleness.
        "FRAMEBUS_MAX_FRAME_AGE_MS": "600000",
        "FRAMEBUS_STOP_AFTER_IDLE_S": "3",
        # `fill_frames` writes RGB records: a graph that takes them as they are.
        "FRAMEBUS_FRAME_FORMAT": "rgb",
        "FRAMEBUS_PROVIDERS": "cpu",
        # As with a GPU provider (what `auto` does there): the engine's CPU threads do not spin
        # between runs, so the cores stay with Kafka and the pipeline's other stages.
        "FRAMEBUS_INTRA_OP_SPINNING": "off",
        "FRAMEBUS_LOG_LEVEL": "warning",
    }


def run_inferencer(
    env: dict[str, str], log_path: Path, profile: Path | None = None, timeout_s: float = 300
) -> tuple[int, UsageSamples]:
    """Run `framebus inferencer` until it stops on idle; optionally under `py-spy record`.

    Returns its exit code and its CPU and page faults sampled every CPU_SAMPLE_S, with the host's
    and the broker's (none under py-spy, whose child it is).
    """
    wrapper: list[str] = []
    if profile is not None:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        wrapper = [py_spy, "record", "--format", "raw", "-o", str(profile), "--"]
    samples: UsageSamples = []
    brokers = broker_pids(env.get("FRAMEBUS_BOOTSTRAP_SERVERS"))
    log_path.unlink(missing_ok=True)
    proc = ServiceProcess("inferencer", env, log_path, wrapper=wrapper)
    deadline = time.monotonic() + timeout_s
    while (code := proc.exit_code()) is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise subprocess.TimeoutExpired("framebus inferencer", timeout_s)
        usage = process_usage(proc.pid) if profile is None else None
        if usage is not None:
            samples.append((time.time(), *usage, *host_usage(brokers)))
        time.sleep(CPU_SAMPLE_S)
    return code, samples


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


def read_detections(kafka: KafkaSettings, topic: str, frames: int) -> list[Any]:
    """Every detections record on the topic (stops 5 s after the last, or 20 s short of `frames`)."""
    client = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"bench-read-{uuid.uuid4().hex[:8]}",
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
