"""Alerts over real Kafka: generated video -> decoder -> inferencer -> alerts consumer."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml

from framebus.codec import AlertCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert
from framebus_alerts import service as alerts_service
from framebus_alerts.settings import AlertsSettings
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_inferencer import service as inferencer_service
from framebus_inferencer.settings import InferencerSettings
from framebus_tools.synthetic import MovingSquare, write_square_video
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

# 640x360 keeps it cheap: the letterbox scale is 1.0, so boxes come back within a pixel or two.
SCENE = MovingSquare(width=640, height=360, side=60, frames=40, fps=25)
ZONE_X = 395  # the zone is the picture's right part, x >= 395
MIN_CONSECUTIVE = 3


def expected_alert_seq(scene: MovingSquare) -> int:
    """First frame at which the square's bottom-centre has been in the zone for 3 frames."""
    streak = 0
    for i in range(scene.frames):
        x1, _y1, x2, _y2 = scene.box(i)
        bottom_center_x = (x1 + x2) / 2
        # The anchor must be clearly on one side of the edge, or the test would be flaky.
        assert abs(bottom_center_x - ZONE_X) > 4, f"frame {i} is too close to the zone edge"
        streak = streak + 1 if bottom_center_x >= ZONE_X else 0
        if streak == MIN_CONSECUTIVE:
            return i
    raise AssertionError("the square never stays in the zone long enough")


def test_alerts_when_square_enters_zone_then_exactly_one_alert_at_the_right_frame(
    kafka: KafkaSettings, topics: TopicFactory, media_dir: Path, square_model: Path, tmp_path: Path
) -> None:
    video = write_square_video(media_dir / "square-360p-alerts.mp4", SCENE)
    names = topics()
    alerts_topic = names.alerts_topic
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "rules": [
                    {
                        "name": "square-right",
                        "camera": "cam-a",
                        "classes": ["square"],
                        "zone": [[ZONE_X, 0], [640, 0], [640, 360], [ZONE_X, 360]],
                        "min_score": 0.5,
                        "min_consecutive": MIN_CONSECUTIVE,
                    },
                    # Same zone, a class the model never reports: must stay silent.
                    {
                        "name": "other-right",
                        "classes": ["other"],
                        "zone": [[ZONE_X, 0], [640, 0], [640, 360]],
                    },
                ]
            }
        )
    )

    stop = threading.Event()
    inferencer = threading.Thread(
        target=inferencer_service.run,
        args=(
            InferencerSettings(
                kafka=kafka,
                topics=names,
                model_path=square_model,
                consumer_group=f"g-{names.frames_topic}",
            ),
            stop,
        ),
    )
    inferencer.start()
    try:
        decoder = DecoderSettings(
            kafka=kafka, topics=names, camera_id="cam-a", camera_url=str(video), target_fps=0
        )
        assert decoder_service.run(decoder) == 0
        assert len(read_topic(kafka, names.detections_topic, SCENE.frames)) == SCENE.frames
    finally:
        stop.set()
        inferencer.join(30)

    printed: list[Alert] = []
    code = alerts_service.run(
        AlertsSettings(
            kafka=kafka,
            topics=names,
            rules=rules,
            alerts_partitions=1,
            alerts_group=f"alerts-{names.frames_topic}",
            stop_after_idle_s=3.0,
        ),
        sink=printed.append,
    )
    assert code == 0

    published = [
        AlertCodec().decode(m.value()) for m in read_topic(kafka, alerts_topic, 1, settle_s=1.0)
    ]
    assert published == printed
    [alert] = published
    assert (alert.rule, alert.camera_id) == ("square-right", "cam-a")
    assert alert.seq == expected_alert_seq(SCENE)
    assert alert.consecutive_frames == MIN_CONSECUTIVE
    [box] = alert.boxes
    expected_box = SCENE.box(alert.seq)
    assert all(
        abs(g - e) <= 4 for g, e in zip((box.x1, box.y1, box.x2, box.y2), expected_box, strict=True)
    )
