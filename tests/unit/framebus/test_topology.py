"""The pipeline's topics declared once: names, specs, partition rules, the stage's topics."""

from __future__ import annotations

import pytest

from framebus import settings as cfg
from framebus.errors import ConfigError
from framebus.topology import (
    DECLARATIONS,
    INFERENCE_TOPICS,
    Partitioning,
    Sizing,
    Topic,
    TopicSettings,
    camera_partition,
    pipeline_specs,
)


def test_topic_settings_when_prefixed_with_framebus_then_the_defaults() -> None:
    assert TopicSettings.with_prefix("framebus") == TopicSettings()
    names = TopicSettings.with_prefix("site-a")
    assert names.tracker_changelog_topic == "site-a.tracker-changelog"
    assert {names.name(t) for t in Topic} == set(names.env().values())


def test_topic_settings_when_loaded_from_env_then_every_name_is_a_variable_and_a_flag() -> None:
    env = TopicSettings.with_prefix("x").env()
    assert cfg.load(TopicSettings, env) == TopicSettings.with_prefix("x")
    with pytest.raises(ConfigError, match="FRAMEBUS_TRACKS_TOPIC"):
        TopicSettings(tracks_topic=" ")


def test_pipeline_specs_when_whole_pipeline_then_each_topic_follows_its_declaration() -> None:
    sizing = Sizing(frames_partitions=12, detections_partitions=4, replication_factor=3)
    specs = {s.name: s for s in pipeline_specs(TopicSettings(), sizing)}
    names = TopicSettings()
    assert specs[names.frames_topic].partitions == 12
    # The tracks topic and both changelogs follow the detections topic's count.
    for topic in (Topic.DETECTIONS, Topic.TRACKS, Topic.TRACKER_CHANGELOG, Topic.ALERTS_CHANGELOG):
        assert specs[names.name(topic)].partitions == 4
    assert specs[names.alerts_topic].partitions == 3
    assert specs[names.deadletter_topic].partitions == 1
    for topic in (Topic.TRACKER_CHANGELOG, Topic.ALERTS_CHANGELOG):
        assert specs[names.name(topic)].config["cleanup.policy"] == "compact"
    assert "cleanup.policy" not in specs[names.tracks_topic].config
    # Frame-sized records where a frame (or a dead-lettered frame) can go.
    frame_sized = {n for n, s in specs.items() if "max.message.bytes" in s.config}
    assert frame_sized == {names.frames_topic, names.deadletter_topic, names.video_topic}
    assert specs[names.alerts_topic].config["retention.ms"] == str(30 * 24 * 3600 * 1000)


@pytest.mark.parametrize(("copies", "min_isr"), [(1, "1"), (2, "1"), (3, "2"), (5, "2")])
def test_pipeline_specs_when_replicated_then_min_insync_replicas_fits_the_copies(
    copies: int, min_isr: str
) -> None:
    specs = pipeline_specs(TopicSettings(), Sizing(2, 2, replication_factor=copies))
    assert {s.replication_factor for s in specs} == {copies}
    assert all(s.creation_config()["min.insync.replicas"] == min_isr for s in specs)
    frames = specs[0]  # a topic's own settings are kept beside it
    assert frames.creation_config()["max.message.bytes"] == frames.config["max.message.bytes"]


def test_pipeline_specs_when_replication_left_to_the_cluster_then_refused_without_a_broker() -> (
    None
):
    with pytest.raises(ValueError, match="replication factor"):
        pipeline_specs(TopicSettings(), Sizing())


def test_declarations_when_listed_then_every_topic_declared_and_changelogs_follow_a_source() -> (
    None
):
    assert set(DECLARATIONS) == set(Topic)
    assert all(
        d.partitioning is Partitioning.FOLLOWS_SOURCE for d in DECLARATIONS.values() if d.compacted
    )
    assert [
        s.name
        for s in pipeline_specs(TopicSettings(), Sizing(replication_factor=1), INFERENCE_TOPICS)
    ] == [
        "framebus.frames",
        "framebus.detections",
        "framebus.deadletter",
    ]


def test_pipeline_specs_when_video_topic_then_deleted_after_its_retention_with_capture_times() -> (
    None
):
    sizing = Sizing(video_partitions=8, video_retention_ms=120_000, replication_factor=1)
    specs = {s.name: s for s in pipeline_specs(TopicSettings(), sizing)}
    video = specs[TopicSettings().video_topic]
    assert video.partitions == 8
    assert video.config["cleanup.policy"] == "delete"
    assert video.config["retention.ms"] == "120000"
    assert video.config["message.timestamp.type"] == "CreateTime"
    assert int(video.config["max.message.bytes"]) >= 8 * 1024 * 1024
    assert specs[TopicSettings().clips_topic].partitions == sizing.alerts_partitions


def test_camera_partition_when_camera_id_empty_then_refused() -> None:
    # The default partitioner scatters records without a key at random: no reader could find them.
    with pytest.raises(ValueError, match="must not be empty"):
        camera_partition("", 6)
