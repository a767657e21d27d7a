"""The two services of the fixed-path latency benchmark (`bench.latency`), started for one run.

A near-free model and generated H.264 cameras are made once per invocation; each run gets fresh
topics and starts `framebus decoder` and `framebus inferencer` on them with the variant's
decoder settings, real time or as fast as the decoder can go.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnx

from bench.benchkit import fresh_topics
from framebus.kafka.settings import KafkaSettings
from framebus.topology import TopicSettings
from framebus_tools.pipeline import CameraSpec, PipelineProcesses, write_cameras_file
from framebus_tools.synthetic import MovingSquare, write_square_video
from testkit.models import near_free_model

SIZE = 640
VIDEO_W, VIDEO_H, VIDEO_FPS = 640, 360, 25


@dataclass(frozen=True)
class Variant:
    """One setting of the decoder's environment (`default`: none)."""

    name: str
    decoder_env: dict[str, str] = field(default_factory=dict)


def parse_variant(text: str) -> Variant:
    """'default', or `+`-joined knobs: 'linger=5' (the decoder producer's linger.ms)."""
    decoder: dict[str, str] = {}
    for part in text.split("+"):
        if part == "default":
            continue
        key, _, value = part.partition("=")
        if key == "linger":
            decoder["FRAMEBUS_PRODUCER_LINGER_MS"] = str(int(value))
        else:
            raise SystemExit(f"unknown knob {part!r} in variant {text!r}")
    return Variant(text, decoder)


class Workdir:
    """Model, videos and logs of one benchmark invocation."""

    def __init__(self, root: Path, kafka: KafkaSettings, cameras: int) -> None:
        self.root, self.kafka = root, kafka
        self.model = root / "near-free-640.onnx"
        onnx.save(near_free_model(SIZE), str(self.model))
        videos = Path("bench-output")  # generated once, reused by later invocations
        self.videos = []
        for i in range(cameras):
            path = videos / f"latency-cam-{i}-{VIDEO_W}x{VIDEO_H}.mp4"
            if not path.exists():
                scene = MovingSquare(VIDEO_W, VIDEO_H, VIDEO_H // 6, 250, VIDEO_FPS, i * 37)
                write_square_video(path, scene)
            self.videos.append(path)

    def start(
        self,
        cameras: int,
        fps: float,
        realtime: bool,
        variant: Variant,
        inferencer_env: dict[str, str],
    ) -> tuple[TopicSettings, PipelineProcesses]:
        """Fresh topics and both services started (the inferencer ready before the decoder)."""
        topics = fresh_topics(self.kafka, min(cameras, 12), prefix="latency")
        run = topics.frames_topic.removesuffix(".frames")
        specs = [
            CameraSpec(f"cam-{i:03d}", str(self.videos[i]), fps, {"sample_phase": i / cameras})
            for i in range(cameras)
        ]
        cameras_file = write_cameras_file(self.root / f"cameras-{run}.yaml", specs)
        logs = self.root / f"logs-{run}"
        logs.mkdir()
        procs = PipelineProcesses(
            self.kafka,
            topics,
            logs,
            decoder_env={
                "FRAMEBUS_CAMERAS_FILE": str(cameras_file),
                "FRAMEBUS_LOOP": "true",
                "FRAMEBUS_REALTIME": str(realtime).lower(),
                "FRAMEBUS_INPUT_WIDTH": str(SIZE),
                "FRAMEBUS_INPUT_HEIGHT": str(SIZE),
                **variant.decoder_env,
            },
            inferencer_env={"FRAMEBUS_MODEL_PATH": str(self.model), **inferencer_env},
        )
        return topics, procs.start()
