"""The live page's cost: its CPU per camera, and the delay it adds between a record and its box.

Each run feeds fresh topics as a running pipeline would: --cameras cameras at --fps, each frame
record (a letterboxed 640x640 tensor of a 1920x1080 picture with moving shapes, as the decoder
sends) followed by its detections record (--boxes boxes; as the inferencer sends, but at once).
Against them, at the same time:

- subject: `python -m framebus_live` (a process) with one real page open in headless Chromium
  (Debian's, driven by Playwright) showing every camera. The page reports each tile it draws
  (the `framebus-live:drawn` event, docs/live.md); the delay of a record is the moment its boxes
  were drawn on the page less the moment its detections record was handed to produce().
- baseline: a bare reader in a process of its own (framebus's Consumer, a group of its own)
  reading the same frames and detections topics (fresh ones, so from their first record) and
  keeping each detections record's bytes: what any viewer of these streams pays at least. Its
  delay is the direct hop: receive time of a detections record less its produce() time.

CPU per camera = a process's user + system CPU seconds over the window (from /proc, librdkafka's
threads included) / window / cameras, in % of a core. Ratios: live / bare reader (CPU), and the
delay the page adds = live delay - direct hop (p50 and p99 per run; medians over runs). Frames
the page skips (tile pacing, a tile still being sent) have no delay; how many were drawn is
printed. No goal is set; the figures go into docs/benchmarks.md.

    .venv/bin/python -m bench.live [--runs 3] [--cameras 16] [--fps 5] [--boxes 4]
        [--partitions 4] [--seconds 20] [--warm-up-s 5] [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import confluent_kafka
import cv2
import numpy as np

from bench.benchkit import (
    SIZE,
    SOURCE,
    U8,
    add_bootstrap_argument,
    delete_topics,
    encode_frame,
    fresh_topics,
    parser_for,
    print_header,
    process_usage,
    ratios,
    runs_text,
)
from framebus.codec import DetectionsCodec
from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Box, Detections, FrameStatus
from framebus.topology import INFERENCE_TOPICS, Topic, TopicSettings
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.wire import FrameEncoder
from framebus_tools.process import ServiceProcess, free_port
from framebus_tools.runstats import percentile
from testkit.browser import CHROMIUM_ARGS, INSTALL_HINT, chromium_path

PICTURES = 10  # distinct pictures a camera cycles through (JPEG cost depends on content)
Key = tuple[str, int]  # (camera, seq)


# ---------------------------------------------------------------------------------------------
# The feed


def pictures(camera: int, boxes: int) -> list[tuple[U8, list[Box]]]:
    """Letterboxed tensors of a 1920x1080 picture with `boxes` shapes, and the boxes around them."""
    rng = np.random.default_rng(camera)
    letterbox = LetterboxBuffer(SIZE, SIZE)
    ramp = np.linspace(40, 200, SOURCE[0], dtype=np.float32)
    out = []
    for i in range(PICTURES):
        img = np.empty((SOURCE[1], SOURCE[0], 3), np.uint8)
        img[:] = np.stack([ramp, ramp[::-1], np.full_like(ramp, 90)], axis=1).astype(np.uint8)
        found = []
        for b in range(boxes):
            x = int((b * 150 + i * 12 + camera * 7) % (SOURCE[0] - 120))
            y = int(rng.integers(40, SOURCE[1] - 260))
            colour = tuple(int(c) for c in rng.integers(0, 255, 3))
            cv2.rectangle(img, (x, y), (x + 90, y + 220), colour, -1)
            found.append(Box(x, y, x + 90, y + 220, 0, "person", 0.9))
        letterbox.fill_rgb(img)
        out.append((letterbox.tensor.copy(), found))
    return out


def feed(
    kafka: KafkaSettings,
    topics: TopicSettings,
    args: argparse.Namespace,
    stop: threading.Event,
    produced: dict[Key, float],
) -> None:
    """Frames then detections, every camera once a 1/fps tick, until `stop`."""
    frames, dets = FrameEncoder(), DetectionsCodec()
    cams = [f"cam-{c:02d}" for c in range(args.cameras)]
    shots = [pictures(c, args.boxes) for c in range(args.cameras)]
    period = 1 / args.fps
    with Producer(kafka) as producer:
        seq, next_tick = 0, time.monotonic()
        while not stop.is_set():
            for c, cam in enumerate(cams):
                tensor, boxes = shots[c][seq % PICTURES]
                now_us = time.time_ns() // 1000
                value = encode_frame(frames, cam, seq, tensor, now_us)
                producer.produce(topics.frames_topic, value, key=cam, block_s=5)
                det = Detections(
                    cam, seq, now_us, FrameStatus.INFERRED, "bench", "1", tuple(boxes),
                    orig_width=SOURCE[0], orig_height=SOURCE[1],
                )  # fmt: skip
                value = dets.encode(det)
                produced[(cam, seq)] = time.time()
                producer.produce(topics.detections_topic, value, key=cam, block_s=5)
            producer.poll(0)
            seq += 1
            next_tick += period
            time.sleep(max(0.0, next_tick - time.monotonic()))
        producer.flush(10)


# ---------------------------------------------------------------------------------------------
# The baseline: a bare reader of the same streams


def _bare_reader(bootstrap: str, topics: TopicSettings, stop_at: float, out: Connection) -> None:
    kafka = KafkaSettings(bootstrap_servers=bootstrap)
    codec = DetectionsCodec()
    # Bare: a raw client built with framebus's consumer configuration.
    consumer = confluent_kafka.Consumer(
        Consumer(kafka, f"bench-live-bare-{uuid.uuid4().hex[:8]}", {}).config
    )
    consumer.subscribe([topics.frames_topic, topics.detections_topic])
    received: list[tuple[bytes, float]] = []
    out.send("subscribed")
    while time.time() < stop_at:
        for m in consumer.consume(200, 0.1):
            if m.error() is None and m.topic() == topics.detections_topic:
                received.append((m.value() or b"", time.time()))
    consumer.close()
    # Decoded only now, so that the reading above stays bare.
    out.send([((d := codec.decode(v)).camera_id, d.seq, at) for v, at in received])


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process so far."""
    usage = process_usage(pid)
    if usage is None:
        raise RuntimeError(f"process {pid} is gone")
    return usage[0]


# ---------------------------------------------------------------------------------------------
# The live service and its page


@contextlib.contextmanager
def live_service(
    kafka: KafkaSettings, topics: TopicSettings
) -> Iterator[tuple[ServiceProcess, str]]:
    """`framebus live` on these topics; (process, its URL) once /readyz answers."""
    port = free_port()
    env = {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **topics.env(),
        "FRAMEBUS_LIVE_SOURCE": "detections",
        "FRAMEBUS_HTTP_PORT": str(port),
        "FRAMEBUS_HTTP_HOST": "127.0.0.1",
    }
    log = Path(tempfile.mkstemp(prefix="bench-live-", suffix=".log")[1])
    proc = ServiceProcess("live", env, log)
    try:
        if proc.wait_ready(60) is None:
            raise RuntimeError(f"framebus live not ready; log {log}:\n{proc.text()[-3000:]}")
        yield proc, f"http://127.0.0.1:{port}/"
    finally:
        proc.stop(15)
        log.unlink(missing_ok=True)


# Collects what the page reports drawing, with the wall-clock time it drew it.
DRAWN_HOOK = """
window.__drawn = [];
window.addEventListener("framebus-live:drawn", (e) => {
  window.__drawn.push([e.detail.camera, e.detail.seq, e.detail.drawn_at_ms]);
});
"""


def open_page(playwright: Any, url: str) -> tuple[Any, Any]:
    """Headless Chromium showing the page; (browser, page)."""
    chromium = chromium_path()
    if chromium is None:
        raise RuntimeError(INSTALL_HINT)
    browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
    page = browser.new_page(viewport={"width": 1600, "height": 1200})
    page.add_init_script(DRAWN_HOOK)
    page.goto(url)
    return browser, page


# ---------------------------------------------------------------------------------------------
# One run


@dataclass(frozen=True)
class RunFigures:
    """One run's figures."""

    live_cpu_pct: float  # % of a core per camera
    bare_cpu_pct: float
    live_p50_ms: float
    live_p99_ms: float
    hop_p50_ms: float
    hop_p99_ms: float
    drawn: int  # records whose boxes the page drew in the window
    fed: int  # detections records produced in the window


def one_run(kafka: KafkaSettings, args: argparse.Namespace) -> RunFigures:
    """Feed, view and read for warm-up + window; the window's figures."""
    from playwright.sync_api import sync_playwright

    topics = fresh_topics(
        kafka, args.partitions, "bench-live", (*INFERENCE_TOPICS, Topic.TRACKS, Topic.ALERTS)
    )
    produced: dict[Key, float] = {}
    stop = threading.Event()
    context = multiprocessing.get_context("spawn")
    try:
        with live_service(kafka, topics) as (proc, url), sync_playwright() as pw:
            browser, page = open_page(pw, url)
            total_s = args.warm_up_s + args.seconds
            receiver, sender = context.Pipe(duplex=False)
            bare = context.Process(
                target=_bare_reader,
                args=(kafka.bootstrap_servers, topics, time.time() + total_s + 3, sender),
                daemon=True,
            )
            bare.start()
            if not receiver.poll(60):
                raise RuntimeError("bare reader did not subscribe in 60 s")
            receiver.recv()
            feeder = threading.Thread(target=feed, args=(kafka, topics, args, stop, produced))
            feeder.start()
            pids = (proc.pid, bare.pid or 0)
            page.wait_for_timeout(args.warm_up_s * 1000)
            window_start = time.time()
            cpu_start = [cpu_s(pid) for pid in pids]
            page.wait_for_timeout(args.seconds * 1000)
            live_cpu, bare_cpu = (cpu_s(pid) - s for pid, s in zip(pids, cpu_start, strict=True))
            window_end = time.time()
            stop.set()
            feeder.join(30)
            drawn = page.evaluate("window.__drawn")
            browser.close()
            hops = receiver.recv() if receiver.poll(60) else []
            bare.join(10)
    finally:
        stop.set()
        delete_topics(kafka, topics)
    window = window_end - window_start
    in_window = {k: t for k, t in produced.items() if window_start <= t <= window_end}
    live_ms = [at - in_window[(c, s)] * 1000 for c, s, at in drawn if (c, s) in in_window]
    hop_ms = [(at - in_window[(c, s)]) * 1000 for c, s, at in hops if (c, s) in in_window]
    if not live_ms or not hop_ms:
        raise RuntimeError(f"nothing measured: {len(live_ms)} drawn, {len(hop_ms)} read directly")
    per_camera = 100 / window / args.cameras  # CPU seconds -> % of a core a camera
    return RunFigures(
        live_cpu * per_camera,
        bare_cpu * per_camera,
        percentile(live_ms, 50),
        percentile(live_ms, 99),
        percentile(hop_ms, 50),
        percentile(hop_ms, 99),
        len(live_ms),
        len(in_window),
    )


def main() -> int:
    """Run the benchmark; print each run and the medians."""
    parser = parser_for(__doc__)
    add_bootstrap_argument(parser)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cameras", type=int, default=16)
    parser.add_argument("--fps", type=float, default=5.0)
    parser.add_argument("--boxes", type=int, default=4, help="boxes in every detections record")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warm-up-s", type=float, default=5.0)
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    print_header(None)
    print(
        f"{args.cameras} cameras x {args.fps:g} fps, {args.boxes} boxes a record; one page in "
        f"headless Chromium; {args.warm_up_s:g} s warm-up, {args.seconds:g} s window; "
        f"{args.runs} runs"
    )
    runs = []
    for i in range(args.runs):
        r = one_run(kafka, args)
        runs.append(r)
        print(
            f"run {i + 1}: CPU a camera live {r.live_cpu_pct:.2f} % of a core, bare reader "
            f"{r.bare_cpu_pct:.2f} % (ratio {r.live_cpu_pct / r.bare_cpu_pct:.2f}); "
            f"record -> box on the page p50 {r.live_p50_ms:.1f} ms, p99 {r.live_p99_ms:.1f} ms; "
            f"direct hop p50 {r.hop_p50_ms:.1f}, p99 {r.hop_p99_ms:.1f} ms; "
            f"{r.drawn} of {r.fed} records drawn",
            flush=True,
        )

    def med(name: str) -> float:
        return float(statistics.median(getattr(r, name) for r in runs))

    cpu_ratios = ratios([r.live_cpu_pct for r in runs], [r.bare_cpu_pct for r in runs])
    added50 = [r.live_p50_ms - r.hop_p50_ms for r in runs]
    added99 = [r.live_p99_ms - r.hop_p99_ms for r in runs]
    print(
        f"medians: CPU a camera live {med('live_cpu_pct'):.2f} % of a core "
        f"({med('live_cpu_pct') * args.cameras / 100:.2f} cores for {args.cameras} cameras), "
        f"bare reader {med('bare_cpu_pct'):.2f} %; live / bare reader "
        f"{statistics.median(cpu_ratios):.2f} (runs {runs_text(cpu_ratios)})"
    )
    print(
        f"the page adds p50 {statistics.median(added50):.1f} ms, p99 "
        f"{statistics.median(added99):.1f} ms to a record (runs p99 {runs_text(added99)}); "
        f"record -> box p50 {med('live_p50_ms'):.1f}, p99 {med('live_p99_ms'):.1f} ms; direct hop "
        f"p50 {med('hop_p50_ms'):.1f}, p99 {med('hop_p99_ms'):.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
