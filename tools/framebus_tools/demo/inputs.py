"""The demo's settings, its topic and group names, and its inputs: video, model, rules, services."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.settings import check, setting
from framebus.topology import Sizing, TopicSettings, pipeline_specs
from framebus_tools.pipeline import ServiceSpec
from framebus_tools.scene import Scene, scene_rules_document, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from framebus_tools.scenes import demo_scene

# The colour detector at 320x320: a quarter of its cost at 640 (the demo shares 2 cores among four
# services), and the 1280x720 scene's boxes still come back within a few pixels.
SCENE_MODEL_INPUT = 320
DWELL_S = 2.0
DEMO_PARTITIONS = 6


@dataclass(frozen=True)
class DemoSettings:
    """Settings of `framebus demo`."""

    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    topics: TopicSettings = field(default_factory=TopicSettings)
    cameras: int = setting(3, "Number of simulated cameras (each playing the generated scene).")
    frames_per_camera: int = setting(
        120, "Frames each camera publishes before the demo ends (the scene's 24 s at 5 fps)."
    )
    target_fps: float = setting(5.0, "Frames per second sampled from each camera.")
    video: Path | None = setting(
        None, "Video to use instead of the generated scene (then no alert rules run)."
    )
    model_path: Path | None = setting(
        None, "YOLOv8 ONNX model to use instead of the generated one (then no alert rules run)."
    )
    motion_gate: bool = setting(
        True,
        "Gate each camera on motion (docs/motion.md): frames where nothing moved skip the model "
        "and the tracker carries the scene through them; the summary counts the runs saved.",
    )
    output_dir: Path = setting(Path("demo-output"), "Where generated files and results go.")
    start_kafka: bool = setting(True, "Start the embedded local Kafka if nothing answers.")
    timeout_s: float = setting(150.0, "Give up if the pipeline has not finished after this long.")
    live_port: int = setting(
        8090, "Port of the `framebus live` page the demo starts (0 = any free port)."
    )
    exit_after_summary: bool = setting(
        False,
        "Stop every service and exit after the summary (tests, CI). Otherwise the cameras loop "
        "and the page, alerts and clips keep running until Ctrl-C.",
    )

    def __post_init__(self) -> None:
        check(1 <= self.cameras <= 128, "cameras", "must be between 1 and 128")
        check(self.frames_per_camera >= 1, "frames_per_camera", "must be >= 1")
        check(0 <= self.live_port <= 65535, "live_port", "must be a TCP port or 0")


@dataclass(frozen=True)
class DemoNames:
    """Groups of the demo's tracker and alerts, named after its detections topic.

    Stable for a given detections topic, so a re-run resumes the groups where the last run left
    off (no old record is processed again) and restores the cameras' states: the cameras' seqs
    restart at 0 with newer capture times, which the tracker and the rules take for a decoder
    restart. Line counts are running counts and carry on; the summary counts this run's crossings.
    The topics are the settings' own (`framebus.topology`).
    """

    tracker_group: str
    alerts_group: str
    clips_group: str


def demo_names(topics: TopicSettings) -> DemoNames:
    """`framebus-demo-tracker`, `-alerts`, `-clips` for the default `framebus.detections`."""
    prefix = topics.detections_topic.removesuffix(".detections")
    return DemoNames(
        tracker_group=f"{prefix}-demo-tracker",
        alerts_group=f"{prefix}-demo-alerts",
        clips_group=f"{prefix}-demo-clips",
    )


@dataclass(frozen=True)
class DemoInputs:
    """What the cameras play, the model, and the alert rules (None: no `framebus alerts`)."""

    videos: list[Path]
    model: Path
    rules: Path | None


def prepare_inputs(settings: DemoSettings) -> DemoInputs:
    """The scene's video (every camera plays it), its colour detector and its alert rules."""
    out = settings.output_dir
    out.mkdir(parents=True, exist_ok=True)
    scene = demo_scene()
    video = settings.video or _scene_video(settings, scene)
    model = settings.model_path or write_color_blob_model(
        out / "scene-colour-blob-yolov8.onnx", scene, SCENE_MODEL_INPUT
    )
    rules = None
    if settings.video is None and settings.model_path is None:  # the rules fit the scene only
        rules = out / "scene-rules.yaml"
        document = scene_rules_document(scene, dwell_s=DWELL_S)
        rules.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return DemoInputs([video] * settings.cameras, model, rules)


def _scene_video(settings: DemoSettings, scene: Scene) -> Path:
    """The part of the scene the run plays (all of it when it plays longer: then it loops)."""
    seconds = min(scene.duration_s, settings.frames_per_camera / settings.target_fps + 1.0)
    digest = hashlib.sha256(repr(scene).encode()).hexdigest()[:8]  # a changed scene: a new file
    video = settings.output_dir / f"scene-{digest}-{seconds:g}s-720p.mp4"
    if not video.exists():
        print(f"generating {video.name} (1280x720 H.264, {seconds:g} s) ...", flush=True)
        write_scene_video(video, scene, end_s=seconds)
    return video


def ensure_demo_topics(settings: DemoSettings) -> None:
    """Every topic of the pipeline, each before anyone reads it (one copy: one local broker)."""
    sizing = Sizing(DEMO_PARTITIONS, DEMO_PARTITIONS, alerts_partitions=1, replication_factor=1)
    ensure_topics(settings.kafka, pipeline_specs(settings.topics, sizing))


def live_process(port: int, clips_dir: Path) -> ServiceSpec:
    """`framebus live` on the demo's topics, on 127.0.0.1:`port`, serving the demo's clips.

    No login: it listens on 127.0.0.1 only (docs/live.md).
    """
    return ServiceSpec(
        "live",
        "live",
        {
            "FRAMEBUS_HTTP_PORT": str(port),
            "FRAMEBUS_HTTP_HOST": "127.0.0.1",
            "FRAMEBUS_CLIPS_DIR": str(clips_dir.resolve()),
            "FRAMEBUS_AUTH": "off",
        },
    )


def clips_process(names: DemoNames, clips_dir: Path, idle_s: str) -> ServiceSpec:
    """`framebus clips` on the demo's alerts, writing to `clips_dir`.

    Short rolls: a clip of the demo's last alerts is ready a few seconds after them.
    """
    return ServiceSpec(
        "clips",
        "clips",
        {
            "FRAMEBUS_STOP_AFTER_IDLE_S": idle_s,
            "FRAMEBUS_CLIPS_DIR": str(clips_dir.resolve()),
            "FRAMEBUS_CLIPS_GROUP": names.clips_group,
            "FRAMEBUS_PRE_ROLL_S": "3",
            "FRAMEBUS_POST_ROLL_S": "2",
            "FRAMEBUS_MAX_WAIT_S": "3",
        },
    )


def downstream(names: DemoNames, rules: Path | None, idle_s: str = "30") -> list[ServiceSpec]:
    """`framebus track` and, with rules, `framebus alerts` on the tracks.

    `idle_s`: their FRAMEBUS_STOP_AFTER_IDLE_S, so no orphan outlives a demo that exits for long.
    """
    idle = {"FRAMEBUS_STOP_AFTER_IDLE_S": idle_s}
    tracker = ServiceSpec(
        "tracker",
        "track",
        {
            **idle,
            "FRAMEBUS_TRACKER_GROUP": names.tracker_group,
        },
    )
    if rules is None:
        return [tracker]
    alerts = ServiceSpec(
        "alerts",
        "alerts",
        {
            **idle,
            "FRAMEBUS_RULES": str(rules),
            "FRAMEBUS_ALERTS_SOURCE": "tracks",
            "FRAMEBUS_ALERTS_GROUP": names.alerts_group,
        },
    )
    return [tracker, alerts]
