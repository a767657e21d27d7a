"""Scraping /metrics of the decoder and the inferencer during a run over real Kafka.

Frames published by the decoder = frames inferred + frames dropped by reason (inferencer), and the
histograms, lag and health agree with that, for a run that ends cleanly.
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from framebus.kafka.settings import KafkaSettings
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.stats import DecoderStats
from framebus_decoder.telemetry import decoder_telemetry
from framebus_inferencer import service as inferencer_service
from framebus_inferencer.settings import InferencerSettings
from framebus_tools.synthetic import MovingSquare, write_square_video
from testkit.models import yolov8_model
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

SIZE = 64
MAX_AGE_MS = 1500

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> Samples:
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback test server
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def try_scrape(port: int) -> Samples:
    """Empty while the server is not up yet."""
    try:
        return scrape(port)
    except urllib.error.URLError:
        return {}


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(
        v
        for (n, lbl), v in samples.items()
        if n == name and all(dict(lbl).get(k) == want for k, want in labels.items())
    )


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"condition not met within {timeout_s} s")


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rows = np.zeros((4 + 1, 3), np.float32)
    rows[:, 0] = [32, 32, 16, 16, 0.9]
    path = tmp_path_factory.mktemp("models") / "tiny.onnx"
    onnx.save(yolov8_model(rows, input_size=SIZE, names=["thing"]), str(path))
    return path


def test_metrics_when_run_ends_cleanly_then_published_equals_inferred_plus_dropped_by_reason(
    kafka: KafkaSettings, topics: TopicFactory, small_model: Path, tmp_path: Path
) -> None:
    names = topics()
    video = write_square_video(
        tmp_path / "v.mp4", MovingSquare(width=160, height=120, side=30, frames=30)
    )
    dec_stats = DecoderStats()

    def decoder(camera: str, realtime: bool, port: int) -> DecoderSettings:
        return DecoderSettings(
            kafka=kafka,
            topics=names,
            camera_id=camera,
            camera_url=str(video),
            target_fps=0,
            realtime=realtime,
            input_width=SIZE,
            input_height=SIZE,
            http_port=port,
        )

    # Phase 1: a camera's frames that will be too old by the time the inferencer starts.
    assert decoder_service.run(decoder("cam-old", False, 0), stats=dec_stats) == 0
    time.sleep(MAX_AGE_MS / 1000 + 0.5)
    inf_port, dec_port = free_port(), free_port()
    settings = InferencerSettings(
        kafka=kafka,
        topics=names,
        model_path=small_model,
        consumer_group=f"g-{names.frames_topic}",
        max_batch=8,
        max_wait_ms=20,
        max_frame_age_ms=MAX_AGE_MS,
        stop_after_idle_s=4,
        http_port=inf_port,
    )
    inferencer = threading.Thread(target=inferencer_service.run, args=(settings, threading.Event()))
    inferencer.start()
    # Phase 2: a live camera (real-time pace) while both services run and are scraped.
    mid_run: list[Samples] = []
    try:
        wait_for(lambda: total(try_scrape(inf_port), "framebus_inferencer_frames_total") >= 30, 60)
        live_stats = DecoderStats()
        live = threading.Thread(
            target=decoder_service.run,
            args=(decoder("cam-live", True, dec_port),),
            kwargs={"stats": live_stats},
        )
        live.start()
        wait_for(
            lambda: (
                total(try_scrape(dec_port), "framebus_decoder_frames_total", outcome="published")
                >= 5
            ),
            30,
        )
        mid_run.append(scrape(dec_port))
        mid_run.append(scrape(inf_port))
        live.join(60)
        assert not live.is_alive()
        # The decoder's server stopped with it: scrape its collector over the same stats now.
        published = 0.0
        for stats in (dec_stats, live_stats):
            telemetry = decoder_telemetry(0, stats, kafka, host="127.0.0.1")
            with telemetry.running(watchdog=False):
                port = telemetry.port
                assert port is not None
                published += total(
                    scrape(port), "framebus_decoder_frames_total", outcome="published"
                )
        assert published == 60

        def settled() -> bool:
            s = scrape(inf_port)
            return (
                total(s, "framebus_inferencer_e2e_latency_seconds_count") == published
                and total(s, "framebus_inferencer_consumer_lag_messages") == 0
            )

        wait_for(settled, 15)  # before the inferencer's idle stop (4 s without frames)
        final = scrape(inf_port)
    finally:
        inferencer.join(60)
    assert not inferencer.is_alive()

    assert (
        total(mid_run[0], "framebus_decoder_frames_total", camera="cam-live", outcome="published")
        >= 5
    )
    assert total(mid_run[1], "framebus_inferencer_provider", provider="CPUExecutionProvider") == 1
    lag_key = (("partition", "0"), ("topic", names.frames_topic))
    assert final[("framebus_inferencer_consumer_lag_messages", lag_key)] == 0  # present, caught up
    check_consistent(final, published)
    assert len(read_topic(kafka, names.detections_topic, 60, timeout_s=30)) == published


def check_consistent(final: Samples, published: float) -> None:
    """The inferencer's final counters against the frames the decoder published."""
    inferred = total(final, "framebus_inferencer_frames_total", status="INFERRED")
    dropped = total(final, "framebus_inferencer_frames_dropped_total")
    assert inferred + dropped == published
    assert total(final, "framebus_inferencer_frames_total") == published
    assert total(final, "framebus_inferencer_frames_received_total") == published
    # cam-old's 30 frames were all older than max_frame_age_ms when the inferencer started.
    assert total(final, "framebus_inferencer_frames_dropped_total", reason="stale") >= 30
    assert total(final, "framebus_inferencer_frames_total", status="DROPPED_STALE") == total(
        final, "framebus_inferencer_frames_dropped_total", reason="stale"
    )
    assert total(final, "framebus_inferencer_batch_size_sum") == inferred
    assert total(final, "framebus_inferencer_batch_size_count") == total(
        final, "framebus_inferencer_batches_total"
    )
    assert total(final, "framebus_inferencer_inference_seconds_count") == total(
        final, "framebus_inferencer_batches_total"
    )
    assert total(final, "framebus_inferencer_queue_wait_seconds_count") == inferred
    assert total(final, "framebus_inferencer_consumer_lag_seconds") == 0
    assert total(final, "framebus_inferencer_memory_bytes", kind="process_rss") > 0
    assert total(final, "framebus_inferencer_errors_total") == 0
