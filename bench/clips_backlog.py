"""`framebus clips` working off a backlog of alerts whose camera has no video: time per alert.

What the chaos soak saw (docs/reliability.md): cameras without `video: true`, so every clip is
NO_VIDEO and only the snapshot is made, from the frames topic. The frames: C cameras at 5 fps for
`--seconds`, 640x640 I420 (the decoder's default), 3 partitions, each record's Kafka timestamp
30 ms after its capture (the decoder produces a frame once it is letterboxed); the video topic
exists and is empty. `--alerts` alerts on the first camera's frames, all older than
`post_roll_s + max_wait_s` (no wait for video), are on the alerts topic before `framebus clips`
starts. Per alert: the gaps between consecutive clip records' `written_at_us` (the first left
out: it holds the group join); their median and p90, and the whole drain.

    .venv/bin/python -m bench.clips_backlog [--alerts 40] [--cameras 3] [--seconds 30]
        [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka

from bench import benchkit
from framebus.codec import AlertCodec, ClipCodec
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings
from framebus.messages import Alert, Box, PixelFormat, RuleType, ZoneAnchor
from framebus.topology import INFERENCE_TOPICS, Topic, TopicSettings
from framebus_decoder.wire import FrameEncoder
from framebus_tools.process import ServiceProcess

S = 1_000_000
FPS = 5
PARTITIONS = 3
PRODUCE_LAG_MS = 30
AGE_S = 60  # the newest frame's age when the alerts are produced: past any wait for video
TOPICS = (*INFERENCE_TOPICS, Topic.VIDEO, Topic.ALERTS, Topic.CLIPS)


def fill(kafka: KafkaSettings, names: TopicSettings, cameras: int, seconds: int) -> int:
    """The cameras' frames, paced by capture time; the first frame's capture time (us)."""
    start_us = time.time_ns() // 1000 - (seconds + AGE_S) * S
    tensors, enc = benchkit.prepared_tensors(), FrameEncoder()
    producer = confluent_kafka.Producer(
        {**kafka.client_config(), "message.max.bytes": MAX_RECORD_BYTES, "linger.ms": 5}
    )
    for seq in range(seconds * FPS):
        captured_us = start_us + seq * S // FPS
        for c in range(cameras):
            cam = f"cam-{c:02d}"
            value = benchkit.encode_frame(
                enc, cam, seq, tensors[seq % len(tensors)], captured_us, PixelFormat.I420
            )
            stamp = captured_us // 1000 + PRODUCE_LAG_MS
            while True:
                try:
                    producer.produce(names.frames_topic, value, key=cam, timestamp=stamp)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.1)
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("frames undelivered after 60 s")
    return start_us


def produce_alerts(kafka: KafkaSettings, names: TopicSettings, start_us: int, count: int) -> None:
    """`count` alerts on cam-00's frames, spread over its last 20 s (from the 10th second on)."""
    box = Box(100.0, 100.0, 300.0, 300.0, 0, "square", 0.9)
    producer = confluent_kafka.Producer(kafka.client_config())
    codec = AlertCodec()
    for n in range(count):
        seq = 10 * FPS + (n * 4) % (20 * FPS)
        alert = Alert(
            "bench", "cam-00", seq, start_us + seq * S // FPS, time.time_ns() // 1000, 3,
            ((0.0, 0.0), (1920.0, 0.0), (1920.0, 1080.0)), ZoneAnchor.CENTER, (box,),
            rule_type=RuleType.DWELL, track_id=f"cam-00/{n}",
        )  # fmt: skip
        producer.produce(names.alerts_topic, codec.encode(alert), key="cam-00")
    if producer.flush(30):
        raise RuntimeError("alerts undelivered after 30 s")


def drain(kafka: KafkaSettings, names: TopicSettings, workdir: Path, count: int) -> list[int]:
    """Run `framebus clips` until it idles; the clip records' `written_at_us`, in order."""
    env = {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_CLIPS_DIR": str(workdir / "clips"),
        "FRAMEBUS_CLIPS_GROUP": f"bench-{uuid.uuid4().hex[:8]}",
        "FRAMEBUS_STOP_AFTER_IDLE_S": "5",
        "FRAMEBUS_LOG_LEVEL": "warning",
    }
    clips = ServiceProcess("clips", env, workdir / "clips.log")
    if clips.wait(60 + 10 * count) != 0:
        raise RuntimeError(f"framebus clips failed:\n{clips.text()[-2000:]}")
    records = benchkit.read_detections(kafka, names.clips_topic, count)
    clips_made = [ClipCodec().decode(m.value()) for m in records]
    if len(clips_made) != count or any(c.snapshot_uri is None for c in clips_made):
        raise RuntimeError(f"expected {count} clips with snapshots, got {clips_made[:3]}...")
    return sorted(c.written_at_us for c in clips_made)


def main() -> int:
    parser = benchkit.parser_for(__doc__)
    parser.add_argument("--alerts", type=int, default=40, help="alerts in the backlog")
    parser.add_argument("--cameras", type=int, default=3, help="cameras on the frames topic")
    parser.add_argument("--seconds", type=int, default=30, help="seconds of frames per camera")
    benchkit.add_bootstrap_argument(parser)
    args = parser.parse_args()
    benchkit.print_header(provider=None)
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    names = benchkit.fresh_topics(kafka, PARTITIONS, prefix="bench-clips", topics=TOPICS)
    try:
        start_us = fill(kafka, names, args.cameras, args.seconds)
        produce_alerts(kafka, names, start_us, args.alerts)
        with tempfile.TemporaryDirectory(prefix="clips-backlog-") as tmp:
            written = drain(kafka, names, Path(tmp), args.alerts)
    finally:
        benchkit.delete_topics(kafka, names)
    gaps_ms = sorted((b - a) / 1000 for a, b in zip(written[1:], written[2:], strict=False))
    p90 = gaps_ms[min(len(gaps_ms) - 1, round(0.9 * len(gaps_ms)))]
    print(
        f"{args.alerts} NO_VIDEO alerts, {args.cameras} cameras x {args.seconds} s of frames: "
        f"per alert median {statistics.median(gaps_ms):.0f} ms, p90 {p90:.0f} ms; "
        f"drain {(written[-1] - written[0]) / S:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
