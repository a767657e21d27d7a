"""`framebus demo`: the whole pipeline on generated cameras, on the local Kafka, with no GPU.

It starts the local Kafka (unless told where another broker is), creates the topics, generates a
1080p H.264 video and a bright-square ONNX detector, runs `framebus decoder` and
`framebus inferencer` as separate processes, prints detections as they arrive and ends with a
summary once every published frame has its detections record.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
import yaml

from framebus.codec import DetectionsCodec
from framebus.errors import FramebusError
from framebus.kafka.settings import KafkaSettings, TopicSettings
from framebus.kafka.topics import ensure_topics, framebus_topics
from framebus.localkafka import LocalKafka
from framebus.messages import Detections, FrameStatus
from framebus.settings import check, setting
from framebus.synthetic import MovingSquare, write_bright_square_model, write_square_video


@dataclass(frozen=True)
class DemoSettings:
    """Settings of `framebus demo`."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    cameras: int = setting(3, "Number of simulated cameras.")
    frames_per_camera: int = setting(40, "Frames each camera publishes before the demo ends.")
    target_fps: float = setting(5.0, "Frames per second sampled from each camera.")
    video: Path | None = setting(None, "Video to use instead of the generated one.")
    model_path: Path | None = setting(
        None, "YOLOv8 ONNX model to use instead of the generated one."
    )
    output_dir: Path = setting(Path("demo-output"), "Where generated files and results go.")
    start_kafka: bool = setting(True, "Start the embedded local Kafka if nothing answers.")
    timeout_s: float = setting(150.0, "Give up if the pipeline has not finished after this long.")

    def __post_init__(self) -> None:
        check(1 <= self.cameras <= 128, "cameras", "must be between 1 and 128")
        check(self.frames_per_camera >= 1, "frames_per_camera", "must be >= 1")


def _ensure_kafka(settings: DemoSettings) -> None:
    from framebus.kafka.topics import broker_reachable

    if broker_reachable(settings.kafka, 3.0):
        return
    if not settings.start_kafka:
        raise FramebusError(f"no Kafka answers at {settings.kafka.bootstrap_servers}")
    port = int(settings.kafka.bootstrap_servers.rsplit(":", 1)[-1])
    broker = LocalKafka(port=port)
    print(f"starting the local Kafka on 127.0.0.1:{port} ...", flush=True)
    broker.start()
    print(f"local Kafka is up; logs: {broker.log_file}", flush=True)


def _prepare_inputs(settings: DemoSettings) -> tuple[Path, Path]:
    out = settings.output_dir
    out.mkdir(parents=True, exist_ok=True)
    video = settings.video
    if video is None:
        video = out / "square-1080p.mp4"
        if not video.exists():
            print("generating a 1920x1080 H.264 test video ...", flush=True)
            write_square_video(video, MovingSquare(frames=300, fps=25))
    model = settings.model_path or write_bright_square_model(out / "bright-square-yolov8.onnx")
    return video, model


def _detections_consumer(settings: DemoSettings, start_ms: int) -> confluent_kafka.Consumer:
    """A reader of the detections topic positioned at the records produced after `start_ms`."""
    consumer = confluent_kafka.Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"framebus-demo-{os.getpid()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    topic = settings.topics.detections_topic
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    wanted = [confluent_kafka.TopicPartition(topic, p, start_ms) for p in meta.partitions]
    positions = consumer.offsets_for_times(wanted, timeout=10)
    for tp in positions:
        if tp.offset < 0:  # nothing after start_ms yet: read from the end
            tp.offset = confluent_kafka.OFFSET_END
    consumer.assign(positions)
    return consumer


def _spawn(command: str, env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "framebus.cli", command],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def run_demo(settings: DemoSettings) -> int:
    """Run the demo; return 0 when every published frame got its detections record."""
    _ensure_kafka(settings)
    ensure_topics(settings.kafka, framebus_topics(settings.topics, 6, 6))
    video, model = _prepare_inputs(settings)
    cams = [{"id": f"demo-cam-{i}", "url": str(video)} for i in range(settings.cameras)]
    cameras_file = settings.output_dir / "cameras.yaml"
    cameras_file.write_text(yaml.safe_dump({"cameras": cams}), encoding="utf-8")
    env = {
        **os.environ,
        "FRAMEBUS_BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
        "FRAMEBUS_FRAMES_TOPIC": settings.topics.frames_topic,
        "FRAMEBUS_DETECTIONS_TOPIC": settings.topics.detections_topic,
        "FRAMEBUS_DEADLETTER_TOPIC": settings.topics.deadletter_topic,
    }
    consumer = _detections_consumer(settings, int(time.time() * 1000))
    inferencer = _spawn(
        "inferencer",
        {**env, "FRAMEBUS_MODEL_PATH": str(model), "FRAMEBUS_STOP_AFTER_IDLE_S": "20"},
        settings.output_dir / "inferencer.log",
    )
    decoder = _spawn(
        "decoder",
        {
            **env,
            "FRAMEBUS_CAMERAS_FILE": str(cameras_file),
            "FRAMEBUS_TARGET_FPS": str(settings.target_fps),
            "FRAMEBUS_MAX_FRAMES": str(settings.frames_per_camera),
            "FRAMEBUS_LOOP": "true",
        },
        settings.output_dir / "decoder.log",
    )
    expected = settings.cameras * settings.frames_per_camera
    codec = DetectionsCodec()
    received: list[Detections] = []
    deadline = time.monotonic() + settings.timeout_s
    try:
        while len(received) < expected and time.monotonic() < deadline:
            if inferencer.poll() is not None:
                break
            for msg in consumer.consume(64, 0.5):
                if msg.error() is None:
                    det = codec.decode(msg.value() or b"")
                    received.append(det)
                    _print_detection(det)
    finally:
        consumer.close()
        for proc in (decoder, inferencer):
            if proc.poll() is None:
                proc.terminate()
            proc.wait(timeout=30)
    return _summarize(received, expected, settings.output_dir)


def _print_detection(det: Detections) -> None:
    boxes = (
        ", ".join(
            f"{b.class_name} {b.score:.2f} [{b.x1:.0f},{b.y1:.0f},{b.x2:.0f},{b.y2:.0f}]"
            for b in det.boxes
        )
        or "nothing"
    )
    print(
        f"{det.camera_id} #{det.seq:<4} {det.status.value:<13} {det.e2e_latency_ms:7.1f} ms  "
        f"batch {det.batch_size}  {boxes}",
        flush=True,
    )


def _summarize(received: list[Detections], expected: int, out: Path) -> int:
    statuses = Counter(d.status for d in received)
    latencies = [d.e2e_latency_ms for d in received if d.status is FrameStatus.INFERRED]
    mean = statistics.fmean(latencies) if latencies else float("nan")
    print("\nsummary")
    print(f"  frames in (published): {expected}")
    print(
        f"  detections out:        {len(received)} "
        f"({', '.join(f'{s.value} {n}' for s, n in statuses.items()) or 'none'})"
    )
    print(f"  boxes:                 {sum(len(d.boxes) for d in received)}")
    print(f"  mean latency:          {mean:.1f} ms (capture -> detections produced)")
    print(f"  logs and inputs in:    {out.resolve()}")
    return 0 if len(received) >= expected else 1
