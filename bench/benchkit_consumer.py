"""The bare consumer: the inferencer side's baseline, a plain Kafka client reading frame records.

It reads a topic with the inferencer's client settings and does no more than it must (optionally
staging each record into a batch row, or answering each with a detections record), in a fresh
process of its own, or several splitting the topic's partitions, so that a ratio against it
measures framebus's own path and not the benchmark process's heap.
"""

from __future__ import annotations

import functools
import multiprocessing
import resource
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import confluent_kafka
import numpy as np

from bench.benchkit_proc import broker_pids, host_usage, others_cores
from bench.benchkit_topics import SIZE, U8
from framebus.codec import DetectionsCodec, FrameCodec
from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.reader import Reader
from framebus.kafka.settings import KafkaSettings
from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, keep_freed_heap
from framebus.messages import Detections, Frame, FrameStatus
from framebus.pixels import i420_nbytes


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
