"""`framebus track` and `framebus alerts` as processes: SIGKILL, restart, join and leave.

Tracking is deterministic, so a run's track ids and alerts can be computed in the test from the
same detections; every process-level run must publish exactly those, once each (read_committed),
however it was interrupted.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import confluent_kafka
import pytest
import yaml

from framebus.codec import AlertCodec, DetectionsCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, Detections, Tracks
from framebus.topology import TopicSettings
from framebus_alerts.engine import AlertEngine
from framebus_alerts.rules import parse_rules
from framebus_tracker.tracker import CameraTracker, TrackerConfig
from testkit.walkers import HEIGHT, camera_detections
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import Service, service_env, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAMERAS = [f"cam-{i}" for i in range(4)]
FPS = 5.0
DURATION_S = 24.0
RESTORED = re.compile(r"restored [1-9][0-9]* states")
RATE = 40.0  # records per second over all cameras: the run lasts about 15 s
RULES = {
    "rules": [
        {
            "name": "middle-line",
            "type": "line_crossing",
            "line": [[640, 0], [640, HEIGHT]],
            "classes": ["person"],
        },
        {
            "name": "centre-dwell",
            "type": "dwell",
            "zone": [[400, 0], [880, 0], [880, HEIGHT], [400, HEIGHT]],
            "seconds": 1.5,
        },
    ]
}


def _detections() -> list[Detections]:
    per_camera = [
        list(camera_detections(cam, FPS, DURATION_S, seed=i, count=6))
        for i, cam in enumerate(CAMERAS)
    ]
    return [records[seq] for seq in range(len(per_camera[0])) for records in per_camera]


def _reference_tracks(dets: list[Detections]) -> list[Tracks]:
    trackers = {cam: CameraTracker(cam, TrackerConfig()) for cam in CAMERAS}
    out = []
    for det in dets:
        tracks = trackers[det.camera_id].step(det)
        assert tracks is not None
        out.append(tracks)
    return out


def _ids(tracks: list[Tracks]) -> dict[tuple[str, int], tuple[str, ...]]:
    return {(t.camera_id, t.seq): tuple(o.track_id for o in t.objects) for t in tracks}


def _alert_key(a: Alert) -> tuple[object, ...]:
    return (a.rule, a.camera_id, a.seq, a.track_id, a.direction, a.measure, a.counts)


class _Feeder(threading.Thread):
    """Produces the detections records at RATE per second, like a running inferencer.

    Camera i goes to partition i mod `partitions` (keyed by camera, as the inferencer keys them),
    so every partition holds cameras and a handover always moves state.
    """

    def __init__(
        self, kafka: KafkaSettings, topic: str, dets: list[Detections], partitions: int
    ) -> None:
        super().__init__(name="detections-feeder")
        self.kafka, self.topic, self.dets, self.partitions = kafka, topic, dets, partitions
        self.sent = 0

    def run(self) -> None:
        producer = confluent_kafka.Producer(self.kafka.client_config())
        codec = DetectionsCodec()
        start = time.monotonic()
        for i, det in enumerate(self.dets):
            partition = CAMERAS.index(det.camera_id) % self.partitions
            producer.produce(self.topic, codec.encode(det), key=det.camera_id, partition=partition)
            producer.poll(0)
            self.sent += 1
            time.sleep(max(0.0, start + (i + 1) / RATE - time.monotonic()))
        assert producer.flush(30) == 0


def _tracker(
    kafka: KafkaSettings, names: TopicSettings, tmp_path: Path, tx: str, tag: str = ""
) -> Service:
    env = service_env(
        kafka,
        names,
        tracker_group=f"trk-{names.frames_topic}",
        transactional_id=tx,
    )
    return Service("track", env, tmp_path / f"tracker-{tx}{tag}.log")


def _tracks_of(kafka: KafkaSettings, names: TopicSettings, expected: int) -> list[Tracks]:
    codec = TracksCodec()
    msgs = read_topic(kafka, names.tracks_topic, expected, settle_s=3.0)
    return [codec.decode(m.value()) for m in msgs]


def _assert_same_as_uninterrupted(got: list[Tracks], dets: list[Detections]) -> None:
    counts = Counter((t.camera_id, t.seq) for t in got)
    doubled = {k: n for k, n in counts.items() if n > 1}
    assert not doubled, f"frames published more than once: {sorted(doubled)[:5]}"
    assert len(got) == len(dets), f"{len(got)} tracks records for {len(dets)} detections"
    want = _ids(_reference_tracks(dets))
    differing = [k for k, ids in _ids(got).items() if want[k] != ids]
    assert not differing, f"{len(differing)} frames with other ids, first {differing[:3]}"


def test_tracker_when_sigkilled_mid_stream_and_restarted_then_ids_equal_an_uninterrupted_run(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    names = topics(detections_partitions=2)
    dets = _detections()
    first = _tracker(kafka, names, tmp_path, "tx-a")
    feeder = _Feeder(kafka, names.detections_topic, dets, 2)
    feeder.start()
    wait_for(lambda: feeder.sent >= len(dets) * 0.4, 60, "detections fed")
    first.signal(signal.SIGKILL)
    first.wait(10)
    second = _tracker(kafka, names, tmp_path, "tx-a", "-restarted")
    feeder.join(120)
    got = _tracks_of(kafka, names, len(dets))
    assert second.stop() == 0, second.text()[-3000:]
    _assert_same_as_uninterrupted(got, dets)
    assert RESTORED.search(second.text()), "nothing was restored"


def test_tracker_when_a_second_instance_joins_and_leaves_then_ids_equal_an_uninterrupted_run(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    names = topics(detections_partitions=4)
    dets = _detections()
    first = _tracker(kafka, names, tmp_path, "tx-a")
    feeder = _Feeder(kafka, names.detections_topic, dets, 4)
    feeder.start()
    wait_for(lambda: feeder.sent >= len(dets) * 0.25, 60, "detections fed")
    second = _tracker(kafka, names, tmp_path, "tx-b")
    # The joining instance takes partitions over from the changelog before it leaves again.
    wait_for(lambda: RESTORED.search(second.text()) is not None, 60, "the joiner restored states")
    wait_for(lambda: feeder.sent >= len(dets) * 0.7, 60, "detections fed")
    assert second.stop() == 0, second.text()[-3000:]
    feeder.join(120)
    got = _tracks_of(kafka, names, len(dets))
    assert first.stop() == 0, first.text()[-3000:]
    _assert_same_as_uninterrupted(got, dets)
    assert RESTORED.search(first.text()), "nothing restored after the leave"


def test_alerts_when_sigkilled_mid_stream_and_restarted_then_no_alert_lost_or_repeated(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path
) -> None:
    names = topics(detections_partitions=2)
    dets = _detections()
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(RULES))
    alerts_topic = names.alerts_topic
    env = service_env(
        kafka,
        names,
        rules=rules_file,
        alerts_group=f"alerts-{names.frames_topic}",
        transactional_id="tx-alerts",
    )
    tracker = _tracker(kafka, names, tmp_path, "tx-t")
    wait_for(lambda: "assigned" in tracker.text(), 60, "tracker assigned")
    first = Service("alerts", env, tmp_path / "alerts-1.log")
    feeder = _Feeder(kafka, names.detections_topic, dets, 2)
    feeder.start()
    wait_for(lambda: feeder.sent >= len(dets) * 0.5, 60, "detections fed")
    # Killed once it has committed a transaction (an alert is printed only then), so the
    # restart has states to restore even when a loaded machine made the first one slow.
    wait_for(lambda: '"rule"' in first.text(), 60, "the first instance committed an alert")
    first.signal(signal.SIGKILL)
    first.wait(10)
    second = Service("alerts", env, tmp_path / "alerts-2.log")
    feeder.join(120)
    _tracks_of(kafka, names, len(dets))  # the tracker is through

    engine = AlertEngine(parse_rules(RULES))
    want = Counter(_alert_key(a) for t in _reference_tracks(dets) for a in engine.observe(t))
    assert sum(want.values()) >= 8, "the walkers must fire both rules several times"
    codec = AlertCodec()

    def published() -> Counter[tuple[object, ...]]:
        msgs = read_topic(kafka, alerts_topic, sum(want.values()), timeout_s=30, settle_s=2.0)
        return Counter(_alert_key(codec.decode(m.value())) for m in msgs)

    got = published()
    assert second.stop() == 0, second.text()[-3000:]
    assert RESTORED.search(second.text()), "the restarted alerts consumer restored nothing"
    assert tracker.stop() == 0
    assert got == want, f"missing {want - got}, extra {got - want}"
