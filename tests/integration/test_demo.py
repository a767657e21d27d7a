"""`framebus demo` end to end on the real broker: every frame answered and tracked, alerts fire."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from framebus.kafka.settings import KafkaSettings
from framebus_tools.demo import DWELL_S, DemoSettings, run_demo
from tests.integration.conftest import TopicFactory

pytestmark = pytest.mark.integration

# Generous on a shared 2-core machine: the 300 ms goal lives in the benchmark (docs/benchmarks.md).
# Before frames waited behind the start-up (producer id, first batches) p99 was ~2.5 s.
P99_BOUND_MS = 1000.0


def _settings(kafka: KafkaSettings, topics: TopicFactory, out: Path, **more: Any) -> DemoSettings:
    """The demo on the test broker and fresh topics, writing to `out`."""
    return DemoSettings(
        kafka=kafka,
        topics=topics(frames_partitions=6, detections_partitions=6),
        output_dir=out,
        start_kafka=False,
        timeout_s=120.0,
        live_port=0,  # any free port: the suite may run beside a demo on 8090
        **more,
    )


# 25 frames at 5 fps play the scene's first 5 s: the blue walker crosses the line IN at ~3.19 s,
# the red one OUT at ~4.31 s, and the green one has stood in the zone for 2 s by ~3.55 s.
FRAMES = 25


def test_demo_when_generated_scene_then_tracks_shown_and_dwell_and_line_alerts_fire(
    kafka: KafkaSettings,
    topics: TopicFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = _settings(kafka, topics, tmp_path / "demo", cameras=2, frames_per_camera=FRAMES)
    assert run_demo(settings) == 0
    out = capsys.readouterr().out
    assert re.search(r"^live page: http://127\.0\.0\.1:\d+/$", out, re.MULTILINE), out
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    # Something moves in every frame of the scene's first 5 s: the motion gate sends them all.
    assert summary["by_status"] == {"INFERRED": 2 * FRAMES}
    assert "motion gate:            saved no model run" in out
    assert summary["tracks_records"] == 2 * FRAMES
    assert summary["startup_s"]["inferencer_ready_s"] is not None  # reported apart
    assert summary["startup_s"]["tracker_ready_s"] is not None
    assert summary["startup_s"]["alerts_ready_s"] is not None
    assert summary["latency_ms"]["p99"] < P99_BOUND_MS, summary
    # The live table and the record lines show short track ids.
    assert re.search(r"^demo-cam-0 +\d+  .*#\d+ person", out, re.MULTILINE), out
    assert re.search(r"^demo-cam-1 #\d+ .* #\d+ person \[", out, re.MULTILINE), out
    # Each alert is printed as it arrives, and the summary counts them.
    assert re.search(r"ALERT demo-cam-0 .*: #\d+ person dwelt \d\.\d s in the zone", out), out
    assert re.search(r"ALERT demo-cam-1 .*: #\d+ person crossed the line IN ", out), out
    assert summary["line_counts"] == {"person:IN": 2, "person:OUT": 2}
    assert "line crossings:         person IN 2, person OUT 2" in out
    dwells = summary["dwell_alerts"]
    assert sorted(d["camera"] for d in dwells) == ["demo-cam-0", "demo-cam-1"]
    assert all(DWELL_S <= d["seconds"] < DWELL_S + 0.5 for d in dwells), dwells
    assert "dwell alerts:           demo-cam-" in out
    assert (tmp_path / "demo" / "demo-cam-0.png").exists()


def test_demo_when_own_video_and_model_then_tracked_without_scene_rules(
    kafka: KafkaSettings,
    topics: TopicFactory,
    square_video: Path,
    square_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = _settings(
        kafka,
        topics,
        tmp_path / "own",
        cameras=1,
        frames_per_camera=10,
        video=square_video,
        model_path=square_model,
    )
    assert run_demo(settings) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "own" / "summary.json").read_text())
    assert summary["tracks_records"] == summary["detections_records"] == 10
    assert summary["tracks_confirmed"] == 1  # the one square, one id throughout
    # No alerts run; `framebus live` runs beside the others and stops cleanly with them.
    assert summary["exit_codes"] == {"decoder": 0, "inferencer": 0, "tracker": 0, "live": 0}
    assert re.search(r"^demo-cam-0 #9 .* #\d+ square \[", out, re.MULTILINE), out
