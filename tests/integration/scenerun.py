"""Running a generated scene through every process: decoder, inferencer, tracker and alerts.

Shared by the scene tests: each starts the consumers on fresh topics, plays the scene's video from
a cameras file, waits until every frame is tracked and seen by alerts, and reads back what the
processes published.
"""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from framebus.codec import AlertCodec, DetectionsCodec, FrameCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, Detections, RuleType, Tracks
from framebus.topology import TopicSettings
from framebus_tools.pipeline import group_caught_up
from framebus_tools.scene import Scene, scene_rules_document, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from tests.integration.kafkautil import read_topic
from tests.integration.scene_truth import IdReport, crossing_counts, score_tracks
from tests.reliability.harness import Service, decoder_summary, service_env, wait_for

DWELLER = "green-dweller"
MAX_IDS_PER_OBJECT = 1.1
TIMING_SLACK_S = 0.05
# 1280x720 letterboxed 4x down: the colour model costs a quarter of its 640 run, and its boxes
# stay within a few original pixels, far below what the IoU matching and the rules need.
INPUT_SIZE = 320


@dataclass(frozen=True)
class Topics:
    """The run's topic names beyond frames/detections/dead letters."""

    names: TopicSettings

    @property
    def tracks(self) -> str:
        """Tracks topic."""
        return self.names.tracks_topic

    @property
    def alerts(self) -> str:
        """Alerts topic."""
        return self.names.alerts_topic

    @property
    def alerts_group(self) -> str:
        """Consumer group of the alerts process."""
        return f"alerts-{self.names.frames_topic}"


def start_decoder(kafka: KafkaSettings, names: TopicSettings, cameras: Path, logs: Path) -> Service:
    """`framebus decoder` on a cameras file, letterboxing to the colour model's input."""
    return Service(
        "decoder",
        service_env(
            kafka, names, cameras_file=cameras, input_width=INPUT_SIZE, input_height=INPUT_SIZE
        ),
        logs / "decoder.log",
    )


def start_consumers(
    kafka: KafkaSettings, t: Topics, rules: Path, model: Path, logs: Path
) -> dict[str, Service]:
    """`track`, `inferencer` and `alerts`, each ready (partitions assigned) before it returns."""
    names = t.names
    tracker = Service(
        "track",
        service_env(
            kafka,
            names,
            tracker_group=f"trk-{names.frames_topic}",
            # One per scene, so that two runs side by side do not fence each other.
            transactional_id=f"tx-trk-{names.frames_topic}",
        ),
        logs / "tracker.log",
    )
    inferencer = Service(
        "inferencer",
        service_env(
            kafka,
            names,
            model_path=model,
            max_batch=4,
            max_wait_ms=20,
            providers="cpu",
            intra_op_spinning="off",
        ),
        logs / "inferencer.log",
    )
    services = {"tracker": tracker, "inferencer": inferencer}
    ready(services, "tracker", "assigned")
    # The tracker created the tracks topic: the alerts process can subscribe to it now.
    services["alerts"] = Service(
        "alerts",
        service_env(
            kafka,
            names,
            rules=rules,
            alerts_partitions=1,
            alerts_group=t.alerts_group,
            transactional_id=f"tx-alerts-{names.frames_topic}",
        ),
        logs / "alerts.log",
    )
    ready(services, "alerts", "assigned")
    ready(services, "inferencer", "warm-up done")
    return services


def ready(services: dict[str, Service], name: str, text: str) -> None:
    def seen() -> bool:
        for other in services.values():
            assert other.alive(), f"{other.command} exited:\n{other.text()[-3000:]}"
        return text in services[name].text()

    wait_for(seen, 60, f"{name} logged {text!r}")


def last_offsets(msgs: list[Any]) -> dict[tuple[str, int], int]:
    """Per (topic, partition), the offset of the last record read."""
    last: dict[tuple[str, int], int] = {}
    for m in msgs:
        key = (m.topic(), m.partition())
        last[key] = max(last.get(key, -1), m.offset())
    return last


def stop_all(services: dict[str, Service]) -> dict[str, int]:
    """SIGTERM to all at once (a second SIGTERM kills), then each one's exit code."""
    for s in services.values():
        if s.alive():
            s.signal(signal.SIGTERM)
    codes = {}
    for name, s in services.items():
        try:
            codes[name] = s.wait(30)
        except subprocess.TimeoutExpired:
            codes[name] = s.stop(1)  # SIGKILL after its own SIGTERM
    return codes


@dataclass(frozen=True)
class Run:
    """What the processes published: video time per frame, tracks, detections keys, alerts."""

    pts: dict[tuple[str, int], float]
    tracks: list[Tracks]
    detections: list[Detections]
    alerts: list[Alert]

    @property
    def detection_keys(self) -> list[tuple[str, int]]:
        """(camera, seq) of every detections record."""
        return [(d.camera_id, d.seq) for d in self.detections]

    def camera_frames(self, camera: str) -> Iterator[tuple[float, Tracks]]:
        """(video time, tracks record) of one camera, in seq order."""
        mine = sorted((t for t in self.tracks if t.camera_id == camera), key=lambda t: t.seq)
        for t in mine:
            yield self.pts[(camera, t.seq)], t


def read_run(kafka: KafkaSettings, t: Topics, delivered: int) -> Run:
    """Every record the run's processes published, `delivered` frames of them."""
    frames = [
        FrameCodec().decode(m.value())
        for m in read_topic(kafka, t.names.frames_topic, delivered, settle_s=0.5)
    ]
    pts = {(f.camera_id, f.seq): f.pts_s for f in frames if f.pts_s is not None}
    assert len(pts) == delivered, f"{len(pts)} frames with pts_s of {delivered} delivered"
    dets = [
        DetectionsCodec().decode(m.value())
        for m in read_topic(kafka, t.names.detections_topic, delivered, settle_s=0.5)
    ]
    tracks = [
        TracksCodec().decode(m.value())
        for m in read_topic(kafka, t.tracks, len(dets), settle_s=1.0)
    ]
    alerts = [AlertCodec().decode(m.value()) for m in read_topic(kafka, t.alerts, 1, settle_s=1.0)]
    return Run(pts, tracks, dets, alerts)


def play_scene(
    kafka: KafkaSettings,
    t: Topics,
    services: dict[str, Service],
    cameras: Path,
    logs: Path,
    during: Callable[[dict[str, Service]], None] | None = None,
) -> tuple[Run, dict[str, dict[str, int]]]:
    """Decode `cameras` into the running consumers until every frame is tracked and alerted on.

    `during(services)` runs while the decoder plays (a fault to inject); every service is stopped
    at the end and must exit 0. Returns what was published and the decoder's counters by camera.
    """
    try:
        services["decoder"] = decoder = start_decoder(kafka, t.names, cameras, logs)
        if during is not None:
            during(services)
        assert decoder.wait(120) == 0, decoder.text()[-3000:]
        counters = decoder_summary(decoder)
        delivered = sum(c.get("delivered", 0) for c in counters.values())
        # Every frame tracked, and every track record seen by the alerts consumer.
        wait_for(
            lambda: len(read_topic(kafka, t.tracks, delivered, timeout_s=1.0)) >= delivered,
            60,
            f"{delivered} tracks records",
        )
        last = last_offsets(read_topic(kafka, t.tracks, delivered, timeout_s=10.0))
        wait_for(lambda: group_caught_up(kafka, t.alerts_group, last), 30, "alerts caught up")
    finally:
        codes = stop_all(services)
    assert codes == dict.fromkeys(services, 0), {
        n: services[n].text()[-2000:] for n, c in codes.items() if c
    }
    return read_run(kafka, t, delivered), counters


def _describe(scene: Scene, report: IdReport) -> str:
    parts = []
    for k, ids in sorted(report.ids_by_actor.items()):
        parts.append(f"{scene.actors[k].name}={dict(ids)}")
    return ", ".join(parts)


def _dwell_error_s(
    scene: Scene, run: Run, camera: str, report: IdReport, dwell_s: float
) -> list[float]:
    """Video time of each DWELL alert of the dweller minus the true time the rule should fire."""
    dweller = next(i for i, a in enumerate(scene.actors) if a.name == DWELLER)
    enter, _ = scene.dwell_truth(dweller)
    return [
        run.pts[(camera, a.seq)] - (enter + dwell_s)
        for a in run.alerts
        if a.camera_id == camera
        and a.rule_type is RuleType.DWELL
        and report.owner(a.track_id) == dweller
    ]


def _person_crossings(scene: Scene, rules: dict[str, Any]) -> dict[str, int]:
    """The scene's crossings of the classes the line rule counts (the car is not counted)."""
    [line_rule] = [r for r in rules["rules"] if r["type"] == "line_crossing"]
    classes = set(line_rule["classes"])
    return {k: n for k, n in scene.expected_crossings().items() if k.split(":")[0] in classes}


def score_camera(
    scene: Scene, run: Run, camera: str, fps: float, rules_doc: dict[str, Any], dwell_s: float
) -> tuple[dict[str, bool], str]:
    """One camera's run against the scene's truth: each check passed or not, and a summary line.

    One id per actor (at most 1.1 per object, no switch, every confirmed box an actor's), the line
    counts of the truth, the dweller's dwell alert once and within one sampling interval, no
    occupancy alert the truth lacks, and one tracks record per detections record.
    """
    report = score_tracks(scene, run.camera_frames(camera))
    mine = [a for a in run.alerts if a.camera_id == camera]
    crossings = crossing_counts(mine)
    expected_crossings = _person_crossings(scene, rules_doc)
    dwell = _dwell_error_s(scene, run, camera, report, dwell_s)
    dwell_all = [a for a in mine if a.rule_type is RuleType.DWELL]
    occupancy = sum(a.rule_type is RuleType.OCCUPANCY for a in mine)
    records = Counter((tr.camera_id, tr.seq) for tr in run.tracks if tr.camera_id == camera)
    det_keys = Counter(k for k in run.detection_keys if k[0] == camera)
    line = (
        f"{camera}: {len(records)} frames, ids/actor {report.total_ids}/"
        f"{report.actors_present} [{_describe(scene, report)}], switches "
        f"{report.switched_frames()}, unmatched {report.unmatched}, crossings {crossings} "
        f"(want {expected_crossings}), dwell alerts {len(dwell_all)} error_s "
        f"{[round(e, 3) for e in dwell]} (measured in capture time: "
        f"{[round(a.measure, 3) for a in dwell_all]} s), occupancy alerts {occupancy}"
    )
    checks = {
        "ids per object": report.total_ids <= MAX_IDS_PER_OBJECT * report.actors_present,
        "actors tracked": report.actors_present == len(scene.actors),
        "no id switch": all(n <= 1 for n in report.switched_frames().values()),
        "every confirmed box matched an actor": report.unmatched == 0,
        "line counts": crossings == expected_crossings,
        "one dwell alert": len(dwell) == len(dwell_all) == 1,
        "dwell timing": len(dwell) == 1 and -TIMING_SLACK_S <= dwell[0] <= 1 / fps + TIMING_SLACK_S,
        "no occupancy alert the truth lacks": occupancy == 0 or bool(scene.occupancy_truth()),
        "one tracks record per detections frame": set(records) == set(det_keys)
        and set(records.values()) == {1},
    }
    return checks, line


@dataclass(frozen=True)
class SceneInputs:
    """What a scene run plays and runs: the video, the colour detector, the alert rules."""

    video: Path
    model: Path
    rules: Path
    rules_doc: dict[str, Any]


def scene_inputs(scene: Scene, video: Path, work: Path, dwell_s: float) -> SceneInputs:
    """The scene's video (generated once, at `video`), its detector and its rules in `work`."""
    if not video.exists():
        write_scene_video(video, scene)
    model = write_color_blob_model(work / "colour-blobs.onnx", scene, INPUT_SIZE)
    rules_doc = scene_rules_document(scene, dwell_s=dwell_s)
    rules = work / "rules.yaml"
    rules.write_text(yaml.safe_dump(rules_doc), encoding="utf-8")
    return SceneInputs(video, model, rules, rules_doc)
