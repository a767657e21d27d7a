"""The generated ground-truth scene through the real processes, scored against its truth.

decoder (three cameras on one file, 2, 5 and 10 fps, realtime) -> frames -> inferencer (the colour
detector) -> detections -> `framebus track` -> tracks -> `framebus alerts` -> alerts, all as
processes on the session's broker. Per camera the tracks must keep one id per actor (at most 1.1
ids per object, no id switch), the line counts must equal the scene's crossings, and the green
person's dwell alert must come exactly once, within one sampling interval of the true time.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from framebus.kafka.settings import KafkaSettings
from framebus_tools.scene import Scene
from framebus_tools.scenes import default_scene
from tests.integration.conftest import TopicFactory
from tests.integration.scenerun import (
    Topics,
    play_scene,
    scene_inputs,
    score_camera,
    start_consumers,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMERA_FPS = {"scene-2fps": 2.0, "scene-5fps": 5.0, "scene-10fps": 10.0}
DWELL_S = 2.0


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


def test_scene_when_three_cameras_run_through_all_processes_then_ids_counts_and_dwell_match_truth(
    kafka: KafkaSettings,
    topics: TopicFactory,
    media_dir: Path,
    tmp_path: Path,
    scene: Scene,
) -> None:
    inputs = scene_inputs(scene, media_dir / "scene-720p.mp4", tmp_path, DWELL_S)
    t = Topics(topics(detections_partitions=3))

    services = start_consumers(kafka, t, inputs.rules, inputs.model, tmp_path)
    cameras = _cameras_file(tmp_path / "cameras.yaml", inputs.video)
    run, counters = play_scene(kafka, t, services, cameras, tmp_path)
    print(f"\ndecoder: {counters}")
    assert set(counters) == set(CAMERA_FPS)
    failures, summary = [], []
    for camera, fps in CAMERA_FPS.items():
        checks, line = score_camera(scene, run, camera, fps, inputs.rules_doc, DWELL_S)
        summary.append(line)
        failures += [f"{camera}: {name}" for name, ok in checks.items() if not ok]
        print(line)
    assert not failures, "\n".join([str(failures), *summary])
