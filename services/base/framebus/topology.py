"""The pipeline's topics, declared once.

Each topic's name setting, key, record, partition rule, cleanup policy, retention and size limit,
and which stage writes it. Every service and tool takes its topic names from `TopicSettings` and its topic specs from here,
so renaming a topic or changing its configuration is a change to this file alone.

```
decoder ─> frames ─> inferencer ─> detections ─> tracker ─> tracks ─> alerts ─> alerts
                                                    └─> tracker-changelog  └─> alerts-changelog
decoder ─> video (every compressed packet) ─┐
                                   alerts ─> clips ─> clips (one record per alert's MP4)
every stage that reads ─> deadletter (records it cannot process, with the reason)
```

Partition rules: frames and detections are sized by the operator (they bound the inferencer's
and the tracker's parallelism); the tracks topic and the tracker's changelog follow the
detections topic, and the alerts changelog follows the topic the rules read, because a stateful
stage writes a camera's state to the changelog partition numbered like the source partition the
camera's records came from (`framebus.kafka.changelog`). The video topic is sized by the operator
and kept for `Sizing.video_retention_ms`. A reader finds a camera's partition of the frames or the
video topic with `camera_partition`, the rule of librdkafka's default partitioner, which their
writers use.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from framebus.errors import ConfigError
from framebus.kafka.settings import MAX_RECORD_BYTES, KafkaSettings
from framebus.kafka.topics import (
    TopicSpec,
    broker_count,
    ensure_topics,
    partition_count,
    replication_factor_for,
)
from framebus.settings import env_name, setting

MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS


class Topic(enum.Enum):
    """The pipeline's topics (the value names the `<value>_topic` setting)."""

    FRAMES = "frames"
    DETECTIONS = "detections"
    TRACKS = "tracks"
    ALERTS = "alerts"
    DEADLETTER = "deadletter"
    TRACKER_CHANGELOG = "tracker_changelog"
    ALERTS_CHANGELOG = "alerts_changelog"
    VIDEO = "video"
    CLIPS = "clips"


@dataclass(frozen=True)
class TopicSettings:
    """Names of the topics framebus reads and writes (every service takes them all)."""

    frames_topic: str = setting("framebus.frames", "Topic of letterboxed frame tensors.")
    detections_topic: str = setting(
        "framebus.detections", "Topic of one detections record per frame."
    )
    deadletter_topic: str = setting(
        "framebus.deadletter", "Topic of messages that could not be processed, with the reason."
    )
    tracks_topic: str = setting("framebus.tracks", "Topic of one tracks record per frame.")
    alerts_topic: str = setting("framebus.alerts", "Topic of alert records.")
    tracker_changelog_topic: str = setting(
        "framebus.tracker-changelog",
        "Compacted topic of each camera's tracker state, restored when a partition is assigned.",
    )
    alerts_changelog_topic: str = setting(
        "framebus.alerts-changelog",
        "Compacted topic of each camera's rule state, restored when a partition is assigned.",
    )
    video_topic: str = setting(
        "framebus.video",
        "Topic of every compressed video packet of each camera, kept for video_retention_ms.",
    )
    clips_topic: str = setting(
        "framebus.clips", "Topic of one record per alert: its MP4 clip and snapshot, or why none."
    )

    def __post_init__(self) -> None:
        for topic in Topic:
            if not self.name(topic).strip():
                raise ConfigError(f"FRAMEBUS_{topic.value.upper()}_TOPIC must not be empty")

    def name(self, topic: Topic) -> str:
        """The configured name of `topic`."""
        return str(getattr(self, _field(topic)))

    @classmethod
    def with_prefix(cls, prefix: str) -> TopicSettings:
        """Every topic named `<prefix>.<topic>` (`framebus` gives the defaults)."""
        return cls(**{_field(t): f"{prefix}.{t.value.replace('_', '-')}" for t in Topic})

    def env(self) -> dict[str, str]:
        """The `FRAMEBUS_*_TOPIC` variables that give a service these names."""
        return {env_name(_field(t)): self.name(t) for t in Topic}


def _field(topic: Topic) -> str:
    return f"{topic.value}_topic"


class Partitioning(enum.Enum):
    """Where a topic's partition count comes from."""

    SIZED = "sized"  # the operator's `Sizing`
    FOLLOWS_SOURCE = "follows source"  # as many as the topic its writer reads
    ONE = "one"


@dataclass(frozen=True)
class Declaration:
    """What a topic holds and how it is configured."""

    key: str
    record: str
    written_by: str
    partitioning: Partitioning
    compacted: bool = False
    retention_ms: int | None = None
    frame_sized: bool = False  # records up to a frame's size (max.message.bytes raised)
    # Kafka timestamps are the writer's (capture times), so a reader can seek by them.
    create_time: bool = False


DECLARATIONS: dict[Topic, Declaration] = {
    # Frames are useful for seconds; minutes let a restarted inferencer catch up.
    Topic.FRAMES: Declaration(
        "camera id",
        "schemas/frame.avsc",
        "decoder",
        Partitioning.SIZED,
        False,
        10 * MINUTE_MS,
        True,
    ),
    Topic.DETECTIONS: Declaration(
        "camera id", "schemas/detections.avsc", "inferencer", Partitioning.SIZED, False, 7 * DAY_MS
    ),
    Topic.TRACKS: Declaration(
        "camera id",
        "schemas/tracks.avsc",
        "tracker",
        Partitioning.FOLLOWS_SOURCE,
        False,
        7 * DAY_MS,
    ),
    Topic.ALERTS: Declaration(
        "camera id", "schemas/alert.avsc", "alerts", Partitioning.SIZED, False, 30 * DAY_MS
    ),
    # A dead letter holds the original record, which may be frame-sized.
    Topic.DEADLETTER: Declaration(
        "the original record's key",
        "the original bytes; the reason and source in framebus.dlq.* headers",
        "every stage that reads",
        Partitioning.ONE,
        False,
        7 * DAY_MS,
        True,
    ),
    Topic.TRACKER_CHANGELOG: Declaration(
        "camera id",
        "JSON state (framebus.kafka.changelog)",
        "tracker",
        Partitioning.FOLLOWS_SOURCE,
        compacted=True,
    ),
    Topic.ALERTS_CHANGELOG: Declaration(
        "camera id",
        "JSON state (framebus.kafka.changelog)",
        "alerts",
        Partitioning.FOLLOWS_SOURCE,
        compacted=True,
    ),
    # A keyframe of a 4K stream can be megabytes: frame-sized. Retention: `Sizing`.
    Topic.VIDEO: Declaration(
        "camera id",
        "schemas/video.avsc",
        "decoder",
        Partitioning.SIZED,
        frame_sized=True,
        create_time=True,
    ),
    Topic.CLIPS: Declaration(
        "camera id", "schemas/clip.avsc", "clips", Partitioning.SIZED, False, 30 * DAY_MS
    ),
}

# The topic the tracker reads: its changelog and the tracks topic follow its partition count.
TRACKER_SOURCE = Topic.DETECTIONS
# What the decoder and the inferencer need: the frame path, without the tracker and alerts.
INFERENCE_TOPICS = (Topic.FRAMES, Topic.DETECTIONS, Topic.DEADLETTER)


@dataclass(frozen=True)
class Sizing:
    """The partition counts the operator chooses, and the copies of every record."""

    frames_partitions: int = 6
    detections_partitions: int = 6
    alerts_partitions: int = 3
    replication_factor: int = 0  # 0: as many as the cluster allows, up to three
    video_partitions: int = 6
    # An alert older than this has no video left to cut a clip from.
    video_retention_ms: int = HOUR_MS

    def copies(self, kafka: KafkaSettings) -> int:
        """The replication factor, asking the cluster its size when it is left to it."""
        return self.replication_factor or replication_factor_for(broker_count(kafka))

    def partitions(self, topic: Topic) -> int:
        """The count of a SIZED topic."""
        return {
            Topic.FRAMES: self.frames_partitions,
            Topic.DETECTIONS: self.detections_partitions,
            Topic.ALERTS: self.alerts_partitions,
            Topic.VIDEO: self.video_partitions,
            # One clip record per alert: as many partitions as the alerts.
            Topic.CLIPS: self.alerts_partitions,
        }[topic]


def camera_partition(camera_id: str, partitions: int) -> int:
    """The partition of a camera's records on a topic keyed by camera (frames, video).

    Their writers use librdkafka's default partitioner, `consistent_random`, which puts a
    non-empty key in CRC-32(key) modulo the partition count: a reader seeks one partition
    instead of filtering them all.
    """
    if not camera_id:
        raise ValueError("a record's key, the camera id, must not be empty")
    return zlib.crc32(camera_id.encode("utf-8")) % partitions


def spec(
    topic: Topic,
    names: TopicSettings,
    partitions: int,
    replicas: int,
    video_retention_ms: int = Sizing.video_retention_ms,
) -> TopicSpec:
    """The topic as it is created: its name and the configs its declaration calls for."""
    d = DECLARATIONS[topic]
    config: dict[str, str] = {}
    if d.compacted:
        # Small segments and a low dirty ratio keep a restore close to one record per key.
        config |= {
            "cleanup.policy": "compact",
            "segment.bytes": str(16 * 1024 * 1024),
            "min.cleanable.dirty.ratio": "0.1",
        }
    if d.retention_ms is not None:
        config["retention.ms"] = str(d.retention_ms)
    if topic is Topic.VIDEO:
        config |= {"cleanup.policy": "delete", "retention.ms": str(video_retention_ms)}
    if d.create_time:
        config["message.timestamp.type"] = "CreateTime"
    if d.frame_sized:
        config["max.message.bytes"] = str(MAX_RECORD_BYTES + 65536)
    if topic is Topic.FRAMES:
        config["segment.bytes"] = str(128 * 1024 * 1024)
    count = 1 if d.partitioning is Partitioning.ONE else partitions
    return TopicSpec(names.name(topic), count, replicas, config)


def pipeline_specs(
    names: TopicSettings, sizing: Sizing, topics: Iterable[Topic] = tuple(Topic)
) -> list[TopicSpec]:
    """Specs of `topics` (default: the whole pipeline's), sized by `sizing`.

    Topics that follow a source get the detections count (the tracker's and, with the default
    tracks source, the alerts' changelog both read a topic of that count). `sizing` must name its
    replication factor (`Sizing.copies` asks the cluster).
    """
    if sizing.replication_factor < 1:
        raise ValueError("pipeline_specs needs a replication factor: use Sizing.copies()")
    out = []
    for topic in topics:
        d = DECLARATIONS[topic]
        if d.partitioning is Partitioning.SIZED:
            count = sizing.partitions(topic)
        else:
            count = sizing.detections_partitions
        out.append(spec(topic, names, count, sizing.replication_factor, sizing.video_retention_ms))
    return out


def ensure_written_topics(
    kafka: KafkaSettings,
    names: TopicSettings,
    writes: Iterable[Topic],
    source: Topic,
    sized: Sizing | None = None,
) -> list[str]:
    """Create the topics a stage writes, if missing; return those created.

    Those that follow the source get the source topic's partition count, and the copies fit
    the cluster; a changelog with fewer partitions than the source is refused (ConfigError).
    """
    partitions = partition_count(kafka, names.name(source))
    sizing = sized or Sizing()
    replicas = sizing.copies(kafka)
    specs = []
    for topic in writes:
        d = DECLARATIONS[topic]
        count = sizing.partitions(topic) if d.partitioning is Partitioning.SIZED else partitions
        specs.append(spec(topic, names, count, replicas, sizing.video_retention_ms))
    created = ensure_topics(kafka, specs)
    for topic in writes:
        if DECLARATIONS[topic].compacted:
            check_changelog(kafka, names.name(topic), names.name(source))
    return created


def check_changelog(kafka: KafkaSettings, changelog: str, source_topic: str) -> None:
    """Refuse a changelog with fewer partitions than its source topic (ConfigError)."""
    source = partition_count(kafka, source_topic)
    have = partition_count(kafka, changelog)
    if have < source:
        raise ConfigError(
            f"{changelog} has {have} partitions but {source_topic} has {source}: a changelog "
            "needs one per source partition (recreate it, or name another changelog topic)"
        )
