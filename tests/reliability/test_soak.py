"""Soak: 8 cameras at 5 fps through both services on the CPU; memory flat, every frame accounted.

FRAMEBUS_SOAK_S sets the duration (default 600 s; CI runs the default). Warm-up is 120 s, or a
fifth of a shorter run; RSS of each process is sampled every 10 s from /proc.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from framebus.kafka.settings import KafkaSettings
from tests.integration.conftest import TopicFactory
from tests.reliability.conftest import MODEL_INPUT
from tests.reliability.harness import (
    Service,
    decoder_summary,
    detections_of,
    rss_kb,
    scrape,
    service_env,
    unaccounted_decoder_frames,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.soak]

CAMERAS = [f"soak-{i}" for i in range(8)]
SAMPLE_EVERY_S = 10.0
RSS_TOLERANCE = 0.10


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_pipeline_when_8_cameras_at_5fps_for_the_soak_then_rss_flat_and_nothing_unaccounted(
    kafka: KafkaSettings,
    topics: TopicFactory,
    small_video: Path,
    square_model_160: Path,
    tmp_path: Path,
) -> None:
    soak_s = float(os.environ.get("FRAMEBUS_SOAK_S", "600"))
    warm_up_s = 120.0 if soak_s >= 600 else soak_s / 5
    names = topics(frames_partitions=4, detections_partitions=2)
    cams = tmp_path / "cameras.yaml"
    cams.write_text(
        "cameras:\n" + "".join(f"  - {{id: {c}, url: '{small_video}'}}\n" for c in CAMERAS),
        encoding="utf-8",
    )
    metrics_port = _free_port()
    inferencer = Service(
        "inferencer",
        service_env(
            kafka,
            names,
            model_path=square_model_160,
            max_batch=8,
            max_wait_ms=50,
            http_port=metrics_port,
        ),
        tmp_path / "inferencer.log",
    )
    decoder = Service(
        "decoder",
        service_env(
            kafka,
            names,
            cameras_file=cams,
            target_fps=5,
            loop="true",
            realtime="true",
            input_width=MODEL_INPUT,
            input_height=MODEL_INPUT,
        ),
        tmp_path / "decoder.log",
    )
    samples: list[tuple[float, int, int]] = []  # (seconds since start, decoder KiB, inferencer)
    start = time.monotonic()
    try:
        while (elapsed := time.monotonic() - start) < soak_s:
            assert decoder.alive(), decoder.text()[-3000:]
            assert inferencer.alive(), inferencer.text()[-3000:]
            samples.append((elapsed, rss_kb(decoder.pid), rss_kb(inferencer.pid)))
            time.sleep(max(0.0, start + len(samples) * SAMPLE_EVERY_S - time.monotonic()))
        decoder.signal(signal.SIGTERM)
        assert decoder.wait(60) == 0, decoder.text()[-3000:]
        counters = decoder_summary(decoder)
        published = {c: counters[c]["published"] for c in CAMERAS}
        total = sum(published.values())
        wait_for(lambda: _inferred(scrape(metrics_port)) >= total, 120, "inferencer catch-up")
        final_metrics = scrape(metrics_port)
    finally:
        decoder.stop()
        inferencer.stop()

    report = [
        f"{t:6.0f} s  decoder {d / 1024:7.1f} MiB  inferencer {i / 1024:7.1f} MiB"
        for t, d, i in samples
    ]
    print("\n".join(["soak RSS:", *report]))
    after = [s for s in samples if s[0] >= warm_up_s]
    assert len(after) >= 2, "soak too short to judge memory"
    for column, name in ((1, "decoder"), (2, "inferencer")):
        base = after[0][column]
        worst = max(abs(s[column] - base) / base for s in after)
        assert worst <= RSS_TOLERANCE, f"{name} RSS moved {worst:.1%} from {base} KiB after warm-up"

    for cam in CAMERAS:
        c = counters[cam]
        assert unaccounted_decoder_frames(c) == 0, (cam, c)
        assert c["published"] == c["delivered"], (cam, c)
    records = detections_of(kafka, names.detections_topic, total, timeout_s=120)
    keys = Counter((d.camera_id, d.seq) for _, d in records)
    expected = {(cam, s) for cam in CAMERAS for s in range(published[cam])}
    assert set(keys) == expected, f"{len(expected - set(keys))} frames without a record"
    statuses = _statuses(final_metrics)
    assert sum(statuses.values()) == len(records)  # one outcome counted per record
    assert "framebus_inferencer_dead_letters_total 0.0" in final_metrics
    print(f"soak: {soak_s:.0f} s, frames={total}, records={len(records)}, statuses={statuses}")


def _statuses(metrics: str) -> dict[str, float]:
    pattern = r'^framebus_inferencer_frames_total\{status="(\w+)"\} ([0-9.e+]+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, metrics, flags=re.MULTILINE)}


def _inferred(metrics: str) -> float:
    return sum(_statuses(metrics).values())
