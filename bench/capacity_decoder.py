"""`bench.capacity`'s decoder side: the decoder's publishing path in-process (camera threads
letterboxing pre-decoded 1080p frames into FramePublisher and the project's Producer) against a
bare confluent_kafka.Producer sending the same record bytes, in alternating rounds, with what
each spends (`Spent`: wall-clock, this process's CPU and the broker's)."""

from __future__ import annotations

import argparse
import contextlib
import resource
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import av
import confluent_kafka
import cv2
import numpy as np

from bench.benchkit import (
    SIZE,
    SOURCE,
    broker_pids,
    delete_topics,
    encode_frame,
    fresh_topics,
    host_usage,
)
from bench.capacity_report import Side, warm_up_label
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Compression
from framebus.pixels import FrameFormat
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.publisher import FramePublisher, PendingFrame
from framebus_decoder.service import producer_overrides
from framebus_decoder.settings import BackpressurePolicy, DecoderSettings
from framebus_decoder.source import letterbox_frame
from framebus_decoder.stats import DecoderStats
from framebus_decoder.wire import FrameEncoder
from framebus_tools.perf.loadtest import end_offsets


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
