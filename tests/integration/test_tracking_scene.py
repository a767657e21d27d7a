"""The generated ground-truth scene through the real processes, scored against its truth.

decoder (three cameras on one file, 2, 5 and 10 fps, realtime) -> frames -> inferencer (the colour
detector) -> detections -> `framebus track` -> tracks -> `framebus alerts` -> alerts, all as
processes on the session's broker. Per camera the tracks must keep one id per actor (at most 1.1
ids per object, no id switch), the line counts must equal the scene's crossings, and the green
person's dwell alert must come exactly once, within one sampling interval of the true time.
"""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from framebus.codec import AlertCodec, DetectionsCodec, FrameCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, RuleType, Tracks
from framebus.topology import TopicSettings
from framebus_tools.pipeline import group_caught_up
from framebus_tools.scene import Scene, default_scene, scene_rules_document, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.integration.scene_truth import IdReport, crossing_counts, score_tracks
from tests.reliability.harness import (
    Service,
    decoder_summary,
    service_env,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMERA_FPS = {"scene-2fps": 2.0, "scene-5fps": 5.0, "scene-10fps": 10.0}
# 1280x720 letterboxed 4x down: the colour model costs a quarter of its 640 run, and its boxes
# stay within a few original pixels, far below what the IoU matching and the rules need.
INPUT_SIZE = 320
DWELL_S = 2.0
DWELLER = "green-dweller"
MAX_IDS_PER_OBJECT = 1.1
TIMING_SLACK_S = 0.05


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


@pytest.fixture(scope="module")
def scene() -> Scene:
    return default_scene()


def _cameras_file(path: Path, video: Path) -> Path:
    cams = [
        {"id": cam, "url": str(video), "target_fps": fps, "realtime": True}
        for cam, fps in CAMERA_FPS.items()
    ]
    path.write_text(yaml.safe_dump({"cameras": cams}), encoding="utf-8")
    return path


def start_decoder(kafka: KafkaSettings, names: TopicSettings, cameras: Path, logs: Path) -> Service:
    """`framebus decoder` on a cameras file, letterboxing to the colour model's input."""
    return Service(
        "decoder",
        service_env(
            kafka, names, cameras_file=cameras, input_width=INPUT_SIZE, input_height=INPUT_SIZE
        ),
        logs / "decoder.log",
    )


def _start_consumers(
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
    _ready(services, "tracker", "assigned")
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
    _ready(services, "alerts", "assigned")
    _ready(services, "inferencer", "warm-up done")
    return services


def _ready(services: dict[str, Service], name: str, text: str) -> None:
    def seen() -> bool:
        for other in services.values():
            assert other.alive(), f"{other.command} exited:\n{other.text()[-3000:]}"
        return text in services[name].text()

    wait_for(seen, 60, f"{name} logged {text!r}")


def _last_offsets(msgs: list[Any]) -> dict[tuple[str, int], int]:
    """Per (topic, partition), the offset of the last record read."""
    last: dict[tuple[str, int], int] = {}
    for m in msgs:
        key = (m.topic(), m.partition())
        last[key] = max(last.get(key, -1), m.offset())
    return last


def _stop_all(services: dict[str, Service]) -> dict[str, int]:
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
    detections: list[tuple[str, int]]
    alerts: list[Alert]

    def camera_frames(self, camera: str) -> Iterator[tuple[float, Tracks]]:
        """(video time, tracks record) of one camera, in seq order."""
        mine = sorted((t for t in self.tracks if t.camera_id == camera), key=lambda t: t.seq)
        for t in mine:
            yield self.pts[(camera, t.seq)], t


def _read_run(kafka: KafkaSettings, t: Topics, delivered: int) -> Run:
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
    return Run(pts, tracks, [(d.camera_id, d.seq) for d in dets], alerts)


def _describe(scene: Scene, report: IdReport) -> str:
    parts = []
    for k, ids in sorted(report.ids_by_actor.items()):
        parts.append(f"{scene.actors[k].name}={dict(ids)}")
    return ", ".join(parts)


def _dwell_error_s(scene: Scene, run: Run, camera: str, report: IdReport) -> list[float]:
    """Video time of each DWELL alert of the dweller minus the true time the rule should fire."""
    dweller = next(i for i, a in enumerate(scene.actors) if a.name == DWELLER)
    enter, _ = scene.dwell_truth(dweller)
    return [
        run.pts[(camera, a.seq)] - (enter + DWELL_S)
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


def test_scene_when_three_cameras_run_through_all_processes_then_ids_counts_and_dwell_match_truth(
    kafka: KafkaSettings,
    topics: TopicFactory,
    media_dir: Path,
    tmp_path: Path,
    scene: Scene,
) -> None:
    video = media_dir / "scene-720p.mp4"
    if not video.exists():
        write_scene_video(video, scene)
    model = write_color_blob_model(tmp_path / "colour-blobs.onnx", scene, INPUT_SIZE)
    rules_doc = scene_rules_document(scene, dwell_s=DWELL_S)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rules_doc), encoding="utf-8")
    t = Topics(topics(detections_partitions=3))

    services = _start_consumers(kafka, t, rules, model, tmp_path)
    try:
        cameras = _cameras_file(tmp_path / "cameras.yaml", video)
        services["decoder"] = decoder = start_decoder(kafka, t.names, cameras, tmp_path)
        assert decoder.wait(60) == 0, decoder.text()[-3000:]
        counters = decoder_summary(decoder)
        delivered = sum(c.get("delivered", 0) for c in counters.values())
        print(f"\ndecoder: {counters}")
        assert set(counters) == set(CAMERA_FPS)
        # Every frame tracked, and every track record seen by the alerts consumer.
        wait_for(
            lambda: len(read_topic(kafka, t.tracks, delivered, timeout_s=1.0)) >= delivered,
            60,
            f"{delivered} tracks records",
        )
        last = _last_offsets(read_topic(kafka, t.tracks, delivered, timeout_s=10.0))
        wait_for(lambda: group_caught_up(kafka, t.alerts_group, last), 30, "alerts caught up")
    finally:
        codes = _stop_all(services)
    assert codes == dict.fromkeys(services, 0), {
        n: services[n].text()[-2000:] for n, c in codes.items() if c
    }

    run = _read_run(kafka, t, delivered)
    expected_crossings = _person_crossings(scene, rules_doc)
    failures, summary = [], []
    for camera, fps in CAMERA_FPS.items():
        report = score_tracks(scene, run.camera_frames(camera))
        mine = [a for a in run.alerts if a.camera_id == camera]
        crossings = crossing_counts(mine)
        dwell = _dwell_error_s(scene, run, camera, report)
        dwell_all = [a for a in mine if a.rule_type is RuleType.DWELL]
        records = Counter((tr.camera_id, tr.seq) for tr in run.tracks if tr.camera_id == camera)
        det_keys = Counter(k for k in run.detections if k[0] == camera)
        summary.append(
            f"{camera}: {len(records)} frames, ids/actor {report.total_ids}/"
            f"{report.actors_present} [{_describe(scene, report)}], switches "
            f"{report.switched_frames()}, unmatched {report.unmatched}, crossings {crossings} "
            f"(want {expected_crossings}), dwell alerts {len(dwell_all)} error_s "
            f"{[round(e, 3) for e in dwell]} (measured in capture time: "
            f"{[round(a.measure, 3) for a in dwell_all]} s), occupancy alerts "
            f"{sum(a.rule_type is RuleType.OCCUPANCY for a in mine)}"
        )
        checks = {
            "ids per object": report.total_ids <= MAX_IDS_PER_OBJECT * report.actors_present,
            "actors tracked": report.actors_present == len(scene.actors),
            "no id switch": all(n <= 1 for n in report.switched_frames().values()),
            "every confirmed box matched an actor": report.unmatched == 0,
            "line counts": crossings == expected_crossings,
            "one dwell alert": len(dwell) == len(dwell_all) == 1,
            "dwell timing": len(dwell) == 1
            and -TIMING_SLACK_S <= dwell[0] <= 1 / fps + TIMING_SLACK_S,
            "one tracks record per detections frame": set(records) == set(det_keys)
            and set(records.values()) == {1},
        }
        failures += [f"{camera}: {name}" for name, ok in checks.items() if not ok]
        print(summary[-1])
    assert not failures, "\n".join([str(failures), *summary])
