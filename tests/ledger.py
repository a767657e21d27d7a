"""What a running pipeline published, read back from its topics, and the exactly-once checks.

Shared by the deployment tests (tests/containers: compose; tests/k8s: the Helm chart): every
frame on the frames topic has one detections and one tracks record, every alert fires once and
has one clip record, every scene rule fires on every camera, and each clip's MP4 decodes.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import av
import confluent_kafka

from framebus.codec import AlertCodec, ClipCodec, DetectionsCodec, FrameCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, Clip, ClipStatus, CrossingDirection, Detections, Frame, Tracks
from framebus.topology import TopicSettings

T = TypeVar("T")
SCENE_RULES = {"person-crosses-line", "person-dwells-in-zone", "people-crowd-the-middle"}
CLIPS_DIR_URI = "file:///var/lib/framebus/clips/"  # the services' clips folder, as records name it
# Known, not yet fixed: on a broker just created, a stateful service's first transaction is
# sometimes fenced and the service exits; its restart loses and doubles nothing (the checks
# below hold). The deployment tests allow that one restart and fail any other.
FENCED_AT_START = "transactional producer fenced by newer producer instance"


def frame_key(record: Frame | Detections | Tracks) -> tuple[str, int, int]:
    """A frame's identity across decoder restarts (its seq starts again at 0)."""
    return (record.camera_id, record.seq, record.capture_ts_us)


def doubled(keys: Iterable[Any]) -> list[Any]:
    """The keys that occur more than once."""
    return [key for key, n in Counter(keys).items() if n > 1]


@dataclass(frozen=True)
class Ledger:
    """What the pipeline published, read back from its topics."""

    frames: list[tuple[str, int, int]]  # frame_key of each record of the frames topic
    detections: list[Detections]
    tracks: list[Tracks]
    alerts: list[tuple[int, int, Alert]]  # (partition, offset, alert): clip records name these
    clips: list[Clip]

    def unanswered(self) -> str:
        """What is still missing, or "" once every frame and alert has its records."""
        missing = []
        if len(self.detections) < len(self.frames):
            missing.append(f"{len(self.frames) - len(self.detections)} detections")
        if len(self.tracks) < len(self.detections):
            missing.append(f"{len(self.detections) - len(self.tracks)} tracks")
        if len(self.clips) < len(self.alerts):
            missing.append(f"{len(self.alerts) - len(self.clips)} clips")
        return ", ".join(missing)


@dataclass(frozen=True)
class TopicReader:
    """Reads every committed record of the pipeline's topics on one Kafka."""

    kafka: KafkaSettings
    topics: TopicSettings = TopicSettings()

    def read_all(self, topic: str, take: Callable[[Any], T], idle_s: float = 3.0) -> list[T]:
        """`take(message)` of every committed record of `topic`, until none came for `idle_s`."""
        consumer = confluent_kafka.Consumer(
            {
                **self.kafka.client_config(),
                "group.id": f"test-reader-{uuid.uuid4().hex}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe([topic])
        out: list[T] = []
        last = time.monotonic()
        deadline = last + 120
        try:
            while time.monotonic() - last < idle_s and time.monotonic() < deadline:
                for msg in consumer.consume(500, 0.5):
                    assert msg.error() is None, msg.error()
                    out.append(take(msg))
                    last = time.monotonic()
        finally:
            consumer.close()
        return out

    def read_values(self, topic: str, decode: Callable[[bytes], T]) -> list[T]:
        """Every committed record of `topic`, decoded."""
        return self.read_all(topic, lambda msg: decode(msg.value()))

    def read_alerts(self) -> list[tuple[int, int, Alert]]:
        """(partition, offset, alert) of every alert."""
        codec = AlertCodec()
        return self.read_all(
            self.topics.alerts_topic,
            lambda msg: (msg.partition(), msg.offset(), codec.decode(msg.value())),
        )

    def read_frame_keys(self) -> list[tuple[str, int, int]]:
        """(camera, seq, capture time) of every frame on the frames topic (pixels left unread)."""
        codec = FrameCodec()
        return self.read_values(self.topics.frames_topic, lambda v: frame_key(codec.decode_view(v)))

    def read_ledger(self, frames: list[tuple[str, int, int]]) -> Ledger:
        """Every record answering `frames`, read from the topics now."""
        return Ledger(
            frames=frames,
            detections=self.read_values(self.topics.detections_topic, DetectionsCodec().decode),
            tracks=self.read_values(self.topics.tracks_topic, TracksCodec().decode),
            alerts=self.read_alerts(),
            clips=self.read_values(self.topics.clips_topic, ClipCodec().decode),
        )

    def wait_answered(self, timeout_s: float = 180.0) -> Ledger:
        """The ledger once every frame, detections record and alert is answered (or the timeout).

        The cameras have stopped: the frames topic is read once.
        """
        deadline = time.monotonic() + timeout_s
        frames = self.read_frame_keys()
        while True:
            ledger = self.read_ledger(frames)
            if not ledger.unanswered() or time.monotonic() > deadline:
                return ledger
            time.sleep(3.0)


def check_exactly_once(ledger: Ledger) -> None:
    """Each frame one detections and one tracks record; each alert once, with one clip record."""
    assert not ledger.unanswered(), f"missing after the wait: {ledger.unanswered()}"
    frames = ledger.frames
    assert not doubled(frames), f"frames published twice: {doubled(frames)[:5]}"
    for name, records in (("detections", ledger.detections), ("tracks", ledger.tracks)):
        keys = [frame_key(r) for r in records]
        assert not doubled(keys), f"{name} doubled: {doubled(keys)[:5]}"
        assert set(keys) == set(frames), (
            f"{name}: {len(set(frames) - set(keys))} frames without a record, "
            f"{len(set(keys) - set(frames))} records of no frame"
        )
    # The frame's capture time too: a camera's seq starts again at 0 when the decoder restarts.
    alerts = [
        (a.rule, a.camera_id, a.seq, a.capture_ts_us, a.track_id, a.direction)
        for _, _, a in ledger.alerts
    ]
    assert not doubled(alerts), f"alerts fired twice: {doubled(alerts)[:5]}"
    clip_of = Counter((c.alert_partition, c.alert_offset) for c in ledger.clips)
    alert_at = {(p, o) for p, o, _ in ledger.alerts}
    assert set(clip_of) == alert_at, (
        f"alerts without a clip record: {sorted(alert_at - set(clip_of))[:5]}; "
        f"clip records of no alert: {sorted(set(clip_of) - alert_at)[:5]}"
    )
    assert max(clip_of.values()) == 1, f"alerts with two clip records: {doubled(clip_of)[:5]}"


def check_scene_alerts(alerts: list[Alert], cameras: Iterable[str]) -> None:
    """Every rule of the scene fires on every camera; the crossings go both ways, by persons."""
    for camera in cameras:
        mine = [a for a in alerts if a.camera_id == camera]
        assert {a.rule for a in mine} == SCENE_RULES, (camera, Counter(a.rule for a in mine))
        directions = {a.direction for a in mine if a.rule == "person-crosses-line"}
        assert directions == {CrossingDirection.IN, CrossingDirection.OUT}, (camera, directions)
        for alert in mine:
            assert {b.class_name for b in alert.boxes} <= {"person"}, alert


def clip_path(clip: Clip) -> str:
    """The clip's path below the clips folder (and below the page's /clips/)."""
    assert clip.uri is not None and clip.uri.startswith(CLIPS_DIR_URI), clip
    return clip.uri.removeprefix(CLIPS_DIR_URI)


def check_clip_files(clips: list[Clip], clips_dir: Path) -> None:
    """Every clip WRITTEN, its MP4 in the clips volume, decoding to at least two seconds."""
    for clip in clips:
        assert clip.status is ClipStatus.WRITTEN, clip
        path = clips_dir / clip_path(clip)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            times = [float(f.time) for f in container.decode(stream) if f.time is not None]
        assert times and max(times) - min(times) >= 2.0, (path.name, len(times))
