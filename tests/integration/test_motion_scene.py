"""Motion gating through every process: the mostly still scene, gated and not, side by side.

Four cameras play `still_scene` (a 24 s dwell with a light switched on, an empty spell, an object
leaving at an edge where another soon enters) at 2 and 5 fps, each rate once with the decoder's
motion gate on and once off, through decoder -> inferencer -> `framebus track` -> `framebus
alerts` on the session's broker. The tracker is SIGKILLed and restarted while the scene is still.
Each camera must match the truth as the ungated scene test does (ids, line counts, the dwell
alert once and on time, no alert from the light); the gated ones must run the model on at most
0.4 times the frames the ungated ones do, and every frame must have exactly one detections and
one tracks record.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus_tools.scene import Scene
from framebus_tools.scenes import still_scene
from tests.integration.conftest import TopicFactory
from tests.integration.scenerun import (
    Run,
    Topics,
    play_scene,
    scene_inputs,
    score_camera,
    start_consumers,
)
from tests.reliability.harness import Service, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# camera -> (fps, gated)
CAMERAS = {
    "gated-2fps": (2.0, True),
    "every-2fps": (2.0, False),
    "gated-5fps": (5.0, True),
    "every-5fps": (5.0, False),
}
DWELL_S = 8.0  # the alert falls in the still spell: only carried objects can fire it
MAX_RUN_RATIO = 0.4
KILL_AT_S = 18.0  # the dweller stands, the light is on: the tracker restores a still scene


def _cameras_file(path: Path, video: Path) -> Path:
    cams = [
        {
            "id": cam,
            "url": str(video),
            "target_fps": fps,
            "realtime": True,
            "motion": {"enabled": gated},
        }
        for cam, (fps, gated) in CAMERAS.items()
    ]
    path.write_text(yaml.safe_dump({"cameras": cams}), encoding="utf-8")
    return path


def _kill_tracker_while_still(logs: Path) -> Callable[[dict[str, Service]], None]:
    def during(services: dict[str, Service]) -> None:
        time.sleep(KILL_AT_S)
        first = services["tracker"]
        first.kill()
        services["tracker"] = Service("track", first.env, logs / "tracker-restarted.log")
        wait_for(lambda: "assigned" in services["tracker"].text(), 60, "tracker re-joined")

    return during


def _model_runs(run: Run, camera: str) -> int:
    return sum(d.status is FrameStatus.INFERRED for d in run.detections if d.camera_id == camera)


def _statuses(run: Run, camera: str) -> Counter[str]:
    return Counter(d.status.name for d in run.detections if d.camera_id == camera)


def _carried_ids_while_still(run: Run, camera: str, start_s: float, end_s: float) -> set[str]:
    """Track ids carried by the still tracks records of a span of video time."""
    return {
        obj.track_id
        for pts, tracks in run.camera_frames(camera)
        if start_s <= pts <= end_s and tracks.status is FrameStatus.STILL
        for obj in tracks.objects
        if obj.carried
    }


def test_motion_gate_when_still_scene_runs_gated_and_not_then_fewer_runs_same_truth(
    kafka: KafkaSettings, topics: TopicFactory, media_dir: Path, tmp_path: Path
) -> None:
    scene: Scene = still_scene()
    inputs = scene_inputs(scene, media_dir / "still-scene-720p.mp4", tmp_path, DWELL_S)
    t = Topics(topics(detections_partitions=2))

    services = start_consumers(kafka, t, inputs.rules, inputs.model, tmp_path)
    cameras = _cameras_file(tmp_path / "cameras.yaml", inputs.video)
    run, counters = play_scene(
        kafka, t, services, cameras, tmp_path, during=_kill_tracker_while_still(tmp_path)
    )
    print(f"\ndecoder: {counters}")
    assert set(counters) == set(CAMERAS)

    failures, summary = [], []
    for camera, (fps, gated) in CAMERAS.items():
        checks, line = score_camera(scene, run, camera, fps, inputs.rules_doc, DWELL_S)
        delivered = counters[camera]["delivered"]
        keys = Counter(k for k in run.detection_keys if k[0] == camera)
        statuses = _statuses(run, camera)
        checks["one detections record per frame"] = len(keys) == delivered and set(
            keys.values()
        ) == {1}
        checks["statuses"] = set(statuses) <= ({"INFERRED", "STILL"} if gated else {"INFERRED"})
        if gated:
            ungated = f"every-{camera.split('-')[1]}"
            ratio = _model_runs(run, camera) / max(1, _model_runs(run, ungated))
            checks[f"model runs <= {MAX_RUN_RATIO} x ungated"] = ratio <= MAX_RUN_RATIO
            # The dweller, carried through the still spell across the tracker's restart.
            carried = _carried_ids_while_still(run, camera, 4.0, 25.0)
            checks["one carried id through the still spell"] = len(carried) == 1
            line += f", model runs ratio {ratio:.2f}, carried {sorted(carried)}"
        line += f", statuses {dict(statuses)}"
        summary.append(line)
        failures += [f"{camera}: {name}" for name, ok in checks.items() if not ok]
        print(line)
    assert not failures, "\n".join([str(failures), *summary])
