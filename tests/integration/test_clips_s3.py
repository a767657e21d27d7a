"""`framebus clips` writing to a real S3-compatible server (versitygw, built from its Go module).

The same alerts go to a bucket and to a folder: the objects must hold the folder's bytes, under
keys that follow from the alerts, and a SIGKILL mid-work must leave one object per file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from framebus.codec import AlertCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Clip, ClipStatus, VideoPacket
from framebus.topology import TopicSettings
from tests.integration import clipsutil as cu
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.integration.s3server import S3Server, running_s3_server
from tests.reliability.harness import wait_for

if TYPE_CHECKING:  # stubs only (types-boto3[s3], the dev extra)
    from types_boto3_s3.client import S3Client

pytestmark = [pytest.mark.integration]

PREFIX = "site-1/clips"


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cu.square_video(tmp_path_factory.mktemp("clips-s3"))


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    folder = tmp_path_factory.mktemp("versitygw")
    (folder / "data").mkdir()
    with running_s3_server(folder / "data", folder / "versitygw.log") as server:
        yield server


@dataclass(frozen=True)
class Camera:
    """cam-a's recorded video on a test's video topic."""

    names: TopicSettings
    start_us: int
    packets: list[VideoPacket]


@pytest.fixture
def camera(kafka: KafkaSettings, topics: TopicFactory, video: Path) -> Camera:
    names = cu.clip_topics(kafka, topics)
    start_us, packets = cu.recorded(video, 30)
    cu.publish_packets(kafka, names.video_topic, packets)
    return Camera(names, start_us, packets)


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    name = f"clips-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=name)
    return name


def objects(client: S3Client, bucket: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def key_of(uri: str | None, bucket: str) -> str:
    assert uri is not None and uri.startswith(f"s3://{bucket}/"), uri
    return uri.removeprefix(f"s3://{bucket}/")


def test_clips_when_target_is_an_s3_bucket_then_objects_hold_the_folder_targets_bytes(
    kafka: KafkaSettings, camera: Camera, s3_server: S3Server, bucket: str, tmp_path: Path
) -> None:
    names, start_us, packets = camera.names, camera.start_us, camera.packets
    cu.produce(
        kafka,
        names.frames_topic,
        [("cam-a", cu.frame_of("cam-a", i, start_us)) for i in (200, 300)],
    )
    alerts = [cu.alert_at("cam-a", i, start_us) for i in (200, 300)]
    cu.produce(kafka, names.alerts_topic, [(a.camera_id, AlertCodec().encode(a)) for a in alerts])

    group = f"clips-{names.alerts_topic}"
    to_s3 = cu.start_clips(
        kafka, names, tmp_path / "unused", group, **s3_server.settings(bucket, PREFIX)
    )
    assert to_s3.wait(120) == 0, to_s3.text()
    # The folder target, on the same alerts in a group and clips topic of its own.
    folder, folder_topic = tmp_path / "clips", f"{names.clips_topic}-dir"
    to_dir = cu.start_clips(kafka, names, folder, f"{group}-dir", clips_topic=folder_topic)
    assert to_dir.wait(120) == 0, to_dir.text()

    client = s3_server.client()
    stored = objects(client, bucket)
    clips = sorted(cu.clips_of(kafka, names, len(alerts)), key=lambda c: c.seq)
    assert [c.status for c in clips] == [ClipStatus.WRITTEN] * len(alerts)
    assert sorted(stored) == sorted(
        key_of(uri, bucket) for c in clips for uri in (c.uri, c.snapshot_uri)
    )
    for clip, alert in zip(clips, alerts, strict=True):
        key = key_of(clip.uri, bucket)
        assert key.startswith(f"{PREFIX}/cam-a/")
        # The bucket holds what the folder target wrote for the same alert, file for file.
        relative = key.removeprefix(f"{PREFIX}/")
        assert stored[key] == (folder / relative).read_bytes()
        snapshot = key_of(clip.snapshot_uri, bucket)
        assert stored[snapshot] == (folder / snapshot.removeprefix(f"{PREFIX}/")).read_bytes()
        assert clip.size_bytes == len(stored[key])
        assert client.head_object(Bucket=bucket, Key=key)["ContentType"] == "video/mp4"
        assert client.head_object(Bucket=bucket, Key=snapshot)["ContentType"] == "image/jpeg"
        local = tmp_path / Path(key).name
        local.write_bytes(stored[key])
        data, _ = cu.mp4_packets(str(local))
        assert data == [p.data for p in cu.expected_span(packets, alert)]
    assert not (tmp_path / "unused").exists()  # nothing went to the folder setting


def test_clips_s3_when_sigkilled_mid_work_and_restarted_then_one_object_and_record_per_alert(
    kafka: KafkaSettings, camera: Camera, s3_server: S3Server, bucket: str, tmp_path: Path
) -> None:
    names, start_us = camera.names, camera.start_us
    alerts = [cu.alert_at("cam-a", index, start_us) for index in range(150, 350, 25)]
    cu.produce(kafka, names.alerts_topic, [(a.camera_id, AlertCodec().encode(a)) for a in alerts])
    client, group = s3_server.client(), f"clips-{names.alerts_topic}"
    settings = s3_server.settings(bucket, PREFIX)

    first = cu.start_clips(kafka, names, tmp_path / "unused", group, **settings)
    wait_for(lambda: client.list_objects_v2(Bucket=bucket)["KeyCount"] > 0, 60, "a first object")
    first.kill()
    before = len(read_topic(kafka, names.clips_topic, len(alerts), timeout_s=3))
    assert before < len(alerts), "killed after the last alert: nothing was left to replay"

    second = cu.start_clips(kafka, names, tmp_path / "unused", group, **settings)
    assert second.wait(120) == 0, second.text()
    clips: list[Clip] = cu.clips_of(kafka, names, len(alerts))
    assert sorted(c.seq for c in clips) == [a.seq for a in alerts]
    assert {c.status for c in clips} == {ClipStatus.WRITTEN}
    # The replayed alerts' objects were put again under the same keys: one object per clip.
    stored = objects(client, bucket)
    assert sorted(stored) == sorted(key_of(c.uri, bucket) for c in clips)
    assert all(len(stored[key_of(c.uri, bucket)]) == c.size_bytes for c in clips)
    assert not client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_clips_s3_when_bucket_does_not_exist_then_exits_2_naming_it_and_not_the_secret(
    kafka: KafkaSettings, topics: TopicFactory, s3_server: S3Server, tmp_path: Path
) -> None:
    names = cu.clip_topics(kafka, topics)
    settings = s3_server.settings("no-such-bucket", PREFIX)
    service = cu.start_clips(
        kafka, names, tmp_path / "unused", f"g-{names.alerts_topic}", **settings
    )
    assert service.wait(60) == 2, service.text()
    assert "cannot reach bucket no-such-bucket" in service.text()
    assert s3_server.secret_key not in service.text()  # the secret is never logged
