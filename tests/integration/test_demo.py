"""`framebus demo` end to end on the real broker: every frame answered and tracked, alerts fire."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
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
        exit_after_summary=True,
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
    # Every alert got its clip record (NO_VIDEO until the decoder publishes video).
    assert sum(summary["clips"].values()) == sum(summary["alerts"].values()), summary
    clips_dir = (tmp_path / "demo" / "clips").resolve()
    assert re.search(rf"^  clips: +\d+ written to {re.escape(str(clips_dir))}", out, re.M), out
    assert summary["exit_codes"]["clips"] == 0


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


def _metric(url: str, name: str) -> float:
    """The sum of a metric's samples on a /metrics page."""
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - our own child, loopback
        text = resp.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def _wait_line(proc: subprocess.Popen[str], pattern: str, timeout_s: float) -> list[str]:
    """The demo's output lines up to the first matching `pattern` (the test fails past the bound)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no line matching {pattern!r}:\n{''.join(lines)}")


def test_demo_when_not_told_to_exit_then_keeps_running_until_sigint_and_exits_0(
    kafka: KafkaSettings,
    topics: TopicFactory,
    square_video: Path,
    square_model: Path,
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        **topics().env(),
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "FRAMEBUS_CAMERAS": "1",
        "FRAMEBUS_FRAMES_PER_CAMERA": "10",
        "FRAMEBUS_VIDEO": str(square_video),
        "FRAMEBUS_MODEL_PATH": str(square_model),
        "FRAMEBUS_OUTPUT_DIR": str(tmp_path / "keep"),
        "FRAMEBUS_START_KAFKA": "false",
        "FRAMEBUS_LIVE_PORT": "0",
        "FRAMEBUS_TIMEOUT_S": "120",
    }
    cmd = [sys.executable, "-m", "framebus_tools.cli", "demo"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)  # noqa: S603
    try:
        lines = _wait_line(proc, r"^live page: ", 120)
        url = lines[-1].split("live page: ")[1].split()[0]
        lines += _wait_line(proc, r"^still running: .*Ctrl-C stops everything", 150)
        assert any(line.startswith("summary") for line in lines), "".join(lines)
        # The page answers, and the camera's frames keep coming after the summary.
        seen = _metric(url + "metrics", "framebus_live_frames_received_total")
        time.sleep(3)
        assert _metric(url + "metrics", "framebus_live_frames_received_total") > seen
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
