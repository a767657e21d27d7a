"""The video topic's cost: the decoder's CPU with it on and off, its bytes, and clip latency.

The video: 10 s of 1920x1080 H.264 at 25 fps, a keyframe a second, encoded at 4 Mbit/s (what a
1080p camera typically sends) from a noisy scene: a moving square over a textured background with
fresh sensor-like noise in every frame, so the encoder spends the whole bitrate. (A generated
flat scene compresses to a few hundred kbit/s; the bytes of the video topic follow the
bitrate, so the noise is what makes (b) realistic.)

(a) CPU: per round, `framebus decoder` on C cameras playing the file unpaced at --fps, with the
    video topic on and off taking turns (their order alternating), on fresh topics; its rusage
    at exit divided by the camera-seconds of video (C x 10 s). Printed per round and as the
    median of per-round on / off.
(b) Bytes: after each video-on round, the record bytes (key + value) on the video topic and on
    the frames topic (640x640 I420 frames, the default) per camera-second; video / frames.
(c) Clip latency: `framebus decoder` plays the file paced (realtime) on one camera with video on;
    then `framebus clips` (pre- and post-roll 2 s) gets --alerts alerts on its frames, one at a
    time, each produced once the previous one's clip record came; the time from producing an
    alert to reading its committed clip record: p50 and p99 (the post-roll of each has passed).

    .venv/bin/python -m bench.video_topic [--cameras 2] [--fps 5] [--runs 3] [--alerts 20]
        [--video-linger-ms 20] [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import av
import confluent_kafka
import numpy as np
import yaml

from bench import benchkit
from framebus.codec import AlertCodec, ClipCodec, FrameCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, Box, Frame, RuleType, ZoneAnchor
from framebus.topology import INFERENCE_TOPICS, Topic, TopicSettings
from framebus_decoder.settings import DecoderSettings
from framebus_tools.perf.loadtest import end_offsets
from framebus_tools.process import ServiceProcess

WIDTH, HEIGHT, FPS, SECONDS = 1920, 1080, 25, 10
BITRATE = 4_000_000
ROLL_S = 2
TOPICS = (*INFERENCE_TOPICS, Topic.VIDEO, Topic.ALERTS, Topic.CLIPS)


def noisy_frames(seed: int = 7) -> Iterator[np.ndarray]:
    """A textured background, a moving square, and new noise in every frame (RGB)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(40, 200, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8)
    background = np.repeat(np.repeat(small, 8, axis=0), 8, axis=1)
    for i in range(FPS * SECONDS):
        frame = background.copy()
        x = (i * 12) % (WIDTH - 200)
        frame[400:600, x : x + 200] = (230, 60, 60)
        noise = rng.integers(-12, 13, (HEIGHT, WIDTH, 1), dtype=np.int16)
        yield np.clip(frame + noise, 0, 255).astype(np.uint8)


def noisy_video(folder: Path) -> Path:
    """The benchmark's video, generated once (cached in the temporary folder)."""
    path = folder / f"noisy-1080p-{BITRATE // 1000}k.mp4"
    if path.exists():
        return path
    print(f"generating {path} ...", flush=True)
    part = path.with_name(f".{path.name}.part")
    with av.open(str(part), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.bit_rate = BITRATE
        stream.options = {"preset": "ultrafast", "g": str(FPS), "keyint_min": str(FPS)}
        stream.options |= {"sc_threshold": "0", "maxrate": str(BITRATE), "bufsize": str(BITRATE)}
        for rgb in noisy_frames():
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    part.rename(path)
    return path


@dataclass(frozen=True)
class Round:
    """One decoder run: its CPU and what it left on the topics."""

    video: bool
    cpu_s: float
    camera_seconds: float
    video_bytes: int = 0
    frames_bytes: int = 0

    def ms(self, value: float) -> float:
        """CPU seconds (or anything) per camera-second, in thousandths."""
        return value * 1000 / self.camera_seconds

    def line(self) -> str:
        """The round's figures."""
        text = f"video {'on ' if self.video else 'off'}: decoder {self.ms(self.cpu_s):.1f} ms CPU"
        text += " per camera-second"
        if self.video:
            per_s = self.camera_seconds
            text += (
                f"; video topic {self.video_bytes / per_s / 1e3:.0f} kB, frames topic "
                f"{self.frames_bytes / per_s / 1e3:.0f} kB per camera-second"
            )
        return text


def cameras_file(path: Path, video: Path, cameras: int, fps: float, on: bool) -> Path:
    """C cameras on the same file, unpaced, the video topic on or off."""
    cams = [
        {"id": f"cam-{i}", "url": str(video), "target_fps": fps, "video": on}
        for i in range(cameras)
    ]
    path.write_text(yaml.safe_dump({"cameras": cams}), encoding="utf-8")
    return path


def decoder_env(kafka: KafkaSettings, names: TopicSettings, **settings: object) -> dict[str, str]:
    """The decoder's settings on a run's topics."""
    env = {"FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, **names.env()}
    env |= {"FRAMEBUS_LOG_LEVEL": "warning", "FRAMEBUS_CAMERAS_RELOAD_S": "0"}
    return env | {f"FRAMEBUS_{k.upper()}": str(v) for k, v in settings.items()}


def topic_bytes(kafka: KafkaSettings, topic: str) -> int:
    """Bytes of every record's key and value on a (fresh) topic (read until 5 s idle)."""
    records = benchkit.read_detections(kafka, topic, end_offsets(kafka, topic))
    return sum(len(m.value() or b"") + len(m.key() or b"") for m in records)


def cpu_round(
    kafka: KafkaSettings, workdir: Path, video: Path, args: argparse.Namespace, on: bool
) -> Round:
    """One unpaced decoder run on C cameras; its rusage and, with video, the topics' bytes."""
    names = benchkit.fresh_topics(
        kafka, partitions=args.cameras, prefix="bench-video", topics=TOPICS
    )
    try:
        cams = cameras_file(workdir / "cameras.yaml", video, args.cameras, args.fps, on)
        env = decoder_env(kafka, names, cameras_file=cams, video_linger_ms=args.video_linger_ms)
        decoder = ServiceProcess("decoder", env, workdir / "decoder.log")
        _, status, usage = os.wait4(decoder.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"decoder failed:\n{decoder.text()[-2000:]}")
        result = Round(on, usage.ru_utime + usage.ru_stime, args.cameras * SECONDS)
        if not on:
            return result
        return Round(
            on,
            result.cpu_s,
            result.camera_seconds,
            topic_bytes(kafka, names.video_topic),
            topic_bytes(kafka, names.frames_topic),
        )
    finally:
        benchkit.delete_topics(kafka, names)


def alert_on(frame: Frame) -> Alert:
    """An alert naming one of the decoder's frames."""
    box = Box(100.0, 100.0, 300.0, 300.0, 0, "square", 0.9)
    return Alert(
        "bench", frame.camera_id, frame.seq, frame.capture_ts_us, time.time_ns() // 1000, 3,
        ((0.0, 0.0), (1920.0, 0.0), (1920.0, 1080.0)), ZoneAnchor.CENTER, (box,),
        rule_type=RuleType.DWELL, track_id=f"{frame.camera_id}/{frame.seq}",
    )  # fmt: skip


def clip_latencies(kafka: KafkaSettings, workdir: Path, video: Path, alerts: int) -> list[float]:
    """Seconds from producing each alert to reading its clip record (one alert at a time)."""
    names = benchkit.fresh_topics(kafka, partitions=1, prefix="bench-clips", topics=TOPICS)
    try:
        env = decoder_env(
            kafka, names, camera_url=video, camera_id="cam-0", realtime="true", video_enabled="true"
        )
        decoder = ServiceProcess("decoder", env, workdir / "decoder-paced.log")
        if decoder.wait(SECONDS + 60) != 0:
            raise RuntimeError(f"decoder failed:\n{decoder.text()[-2000:]}")
        codec = FrameCodec()
        frames = [
            codec.decode(m.value()) for m in benchkit.read_detections(kafka, names.frames_topic, 1)
        ]
        middle = [f for f in frames if ROLL_S * 5 <= f.seq < len(frames) - ROLL_S * 5]
        chosen = [middle[i % len(middle)] for i in range(alerts + 1)]  # the first warms up
        clips_env = decoder_env(
            kafka,
            names,
            clips_dir=workdir / "clips",
            pre_roll_s=ROLL_S,
            post_roll_s=ROLL_S,
            clips_group=f"bench-{uuid.uuid4().hex[:8]}",
        )
        clips = ServiceProcess("clips", clips_env, workdir / "clips.log")
        try:
            return timed_clips(kafka, names, chosen)[1:]
        finally:
            clips.stop()
    finally:
        benchkit.delete_topics(kafka, names)


def timed_clips(kafka: KafkaSettings, names: TopicSettings, frames: list[Frame]) -> list[float]:
    """Produce an alert per frame, each once the previous one's clip record was read."""
    producer = confluent_kafka.Producer(kafka.client_config())
    consumer = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"bench-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([names.clips_topic])
    codec, seconds = ClipCodec(), []
    try:
        for n, frame in enumerate(frames):
            alert = alert_on(frame)
            producer.produce(names.alerts_topic, AlertCodec().encode(alert), key=frame.camera_id)
            producer.flush(10)
            sent = time.monotonic()
            deadline = sent + (120 if n == 0 else 60)  # the first waits for the group join
            while time.monotonic() < deadline:
                msgs = [m for m in consumer.consume(10, 0.05) if m.error() is None]
                if any(codec.decode(m.value() or b"").seq == frame.seq for m in msgs):
                    break
            else:
                raise RuntimeError(f"no clip record for alert {n} within the deadline")
            seconds.append(time.monotonic() - sent)
    finally:
        consumer.close()
    return seconds


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


OPTIONS: tuple[tuple[str, type, object, str], ...] = (
    ("--cameras", int, 2, "cameras playing the file"),
    ("--fps", float, 5.0, "frames sampled per second"),
    ("--runs", int, 3, "rounds of each side (median)"),
    ("--alerts", int, 20, "alerts timed for clip latency"),
    ("--video-linger-ms", int, DecoderSettings().video_linger_ms, "the video producer's linger.ms"),
)


def main() -> int:
    parser = benchkit.parser_for(__doc__)
    for flag, kind, default, text in OPTIONS:
        parser.add_argument(flag, type=kind, default=default, help=text)
    benchkit.add_bootstrap_argument(parser)
    args = parser.parse_args()
    benchkit.print_header(provider=None)
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    cache = Path(tempfile.gettempdir()) / "framebus-bench"
    cache.mkdir(exist_ok=True)
    video = noisy_video(cache)
    kbit_s = video.stat().st_size * 8 / SECONDS / 1000
    print(f"video: {WIDTH}x{HEIGHT} {FPS} fps, {SECONDS} s, {kbit_s:.0f} kbit/s (file)")
    with tempfile.TemporaryDirectory(prefix=f"video-{uuid.uuid4().hex[:6]}-") as tmp:
        workdir = Path(tmp)
        on: list[Round] = []
        off: list[Round] = []
        for run in range(args.runs):
            for side in (True, False) if run % 2 == 0 else (False, True):
                result = cpu_round(kafka, workdir, video, args, side)
                (on if side else off).append(result)
                print(f"round {run + 1} {result.line()}", flush=True)
        latencies = clip_latencies(kafka, workdir, video, args.alerts)
    med = statistics.median
    print(
        f"median decoder CPU: video on {on[0].ms(med(r.cpu_s for r in on)):.1f}, off "
        f"{off[0].ms(med(r.cpu_s for r in off)):.1f} ms per camera-second"
    )
    benchkit.print_median_ratio(
        "decoder CPU, video on / off",
        benchkit.ratios([r.cpu_s for r in on], [r.cpu_s for r in off]),
    )
    benchkit.print_median_ratio(
        "bytes per camera-second, video topic / frames topic",
        [r.video_bytes / r.frames_bytes for r in on],
    )
    print(
        f"median video topic {med(r.video_bytes for r in on) * 8 / on[0].camera_seconds / 1000:.0f} "
        f"kbit/s per camera (file {kbit_s:.0f} kbit/s)"
    )
    print(
        f"clip latency (alert produced -> clip record read), {len(latencies)} alerts, "
        f"{ROLL_S} s pre/post roll: p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
