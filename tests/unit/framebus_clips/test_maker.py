"""One alert's clip from stubbed topics: what is written and what the record says."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

import av
import pytest

from framebus.codec import FrameCodec, VideoPacketCodec
from framebus.messages import Alert, ClipStatus, Frame, VideoPacket, ZoneAnchor
from framebus.topology import TopicSettings
from framebus.videopackets import demux_file
from framebus_clips.maker import ClipMaker
from framebus_clips.reading import IDLE, Idle
from framebus_clips.settings import ClipsSettings
from framebus_clips.stats import ClipsStats
from framebus_clips.store import ClipStoreError, DirectoryStore
from tests.conftest import GopVideo
from tests.unit.framebus_clips.test_snapshot import frame

S = 1_000_000
T0 = 1_700_000_000 * S
TOPICS = TopicSettings()
PRODUCE_LAG_MS = 30


class StubTopics:
    """The video topic holds `packets`, the frames topic `frames` (Kafka timestamp: capture time
    plus `PRODUCE_LAG_MS`, as the decoder produces them); which times the frames are read from.
    """

    def __init__(
        self,
        packets: Sequence[VideoPacket],
        earliest_ms: int | None = None,
        frames: Sequence[Frame] = (),
    ) -> None:
        codec = VideoPacketCodec()
        self.records = [(codec.encode(p), p.capture_ts_us // 1000) for p in packets]
        self.frames = [
            (FrameCodec().encode(f), f.capture_ts_us // 1000 + PRODUCE_LAG_MS) for f in frames
        ]
        self.earliest = earliest_ms
        self.idle_polls = 0
        self.frames_read_from: list[int] = []

    def partition_of(self, topic: str, camera_id: str) -> int | None:
        return 0

    def earliest_ms(self, topic: str, partition: int) -> int | None:
        return self.earliest

    def values(
        self, topic: str, partition: int, key: str | None, from_ms: int, deadline: float
    ) -> Iterator[tuple[bytes, int] | Idle]:
        if topic == TOPICS.video_topic:
            yield from (r for r in self.records if r[1] >= from_ms)
        else:
            self.frames_read_from.append(from_ms)
            yield from (r for r in self.frames if r[1] >= from_ms)
        while True:  # at the end: idle until the caller gives up
            self.idle_polls += 1
            yield IDLE


def alert_at(capture_ts_us: int) -> Alert:
    return Alert("dwell", "cam-1", 7, capture_ts_us, capture_ts_us, 1, (), ZoneAnchor.CENTER, ())


def maker(tmp_path: Path, topics: StubTopics, now_s: float, **more: float) -> ClipMaker:
    settings = ClipsSettings(clips_dir=tmp_path, pre_roll_s=0.4, post_roll_s=0.4, **more)
    return ClipMaker(settings, topics, ClipsStats(), clock=lambda: now_s)


def test_make_when_the_video_covers_the_window_then_written_with_its_span(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", T0))
    alert = alert_at(T0 + S)  # frame 25; the clip runs from the keyframe at 0.4 s, frame 10
    clip = maker(tmp_path, StubTopics(packets), now_s=T0 / S + 60).make(alert, 2, 17)
    assert clip.status is ClipStatus.WRITTEN
    assert (clip.alert_partition, clip.alert_offset) == (2, 17)
    assert clip.start_ts_us == packets[10].capture_ts_us
    assert clip.end_ts_us == T0 + S + 400_000
    assert clip.reason == "no snapshot: the alert's frame is not on the frames topic"
    with av.open((clip.uri or "").removeprefix("file://")) as container:
        assert [bytes(p) for p in container.demux(video=0) if p.size] == [
            p.data for p in packets[10:36]
        ]


def test_make_when_the_post_roll_never_comes_then_cut_short_once_the_wait_is_over(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", T0))  # 1.6 s of video
    alert = alert_at(T0 + 1_400_000)
    topics = StubTopics(packets)
    # The clock is past the post-roll's end plus max_wait_s: the first idle poll ends the read.
    clip = maker(tmp_path, topics, now_s=T0 / S + 12, max_wait_s=10).make(alert, 0, 0)
    assert clip.status is ClipStatus.WRITTEN
    assert clip.reason is not None and "before the post-roll's end" in clip.reason
    # The video read's one; the snapshot's two (from the alert's time, then from
    # snapshot_search_s before it): the frames topic is empty.
    assert topics.idle_polls == 3


def test_make_when_no_packets_and_the_video_aged_out_then_video_aged_out(tmp_path: Path) -> None:
    alert = alert_at(T0)
    topics = StubTopics([], earliest_ms=(T0 + 3000 * S) // 1000)
    clip = maker(tmp_path, topics, now_s=T0 / S + 7200).make(alert, 0, 0)
    assert clip.status is ClipStatus.VIDEO_AGED_OUT
    assert clip.uri is None and clip.reason and "keeps 3600 s" in clip.reason
    assert list(tmp_path.iterdir()) == []


class RefusingStore(DirectoryStore):
    """A folder store whose uploads fail, as an unreachable object store's do."""

    def put_file(self, key: str, path: Path, content_type: str) -> str:
        raise ClipStoreError(f"cannot upload {key}: connection refused")


def test_make_when_the_store_refuses_the_clip_then_raises_and_publishes_no_record(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", T0))
    settings = ClipsSettings(pre_roll_s=0.4, post_roll_s=0.4)
    maker = ClipMaker(
        settings, StubTopics(packets), ClipsStats(), clock=lambda: T0 / S + 60,
        store=RefusingStore(tmp_path),
    )  # fmt: skip
    with pytest.raises(ClipStoreError, match="connection refused"):
        maker.make(alert_at(T0 + S), 0, 1)


def test_make_when_two_alerts_in_one_second_then_each_gets_its_own_named_file(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", T0))
    make = maker(tmp_path, StubTopics(packets), now_s=T0 / S + 60).make
    first = make(alert_at(T0 + S), 0, 1)
    second = make(alert_at(T0 + S + 200_000), 0, 2)
    assert first.uri != second.uri
    assert (first.uri or "").endswith("Z_dwell_seq7.mp4")
    assert len(list((tmp_path / "cam-1").glob("*.mp4"))) == 2


def frames_every_200ms(
    first_seq: int, count: int, still: frozenset[int] = frozenset()
) -> list[Frame]:
    """cam-1's frames at 5 fps from T0; those in `still` are still (no pixels)."""
    return [
        dataclasses.replace(frame(seq, T0 + seq * 200_000, still=seq in still), camera_id="cam-1")
        for seq in range(first_seq, first_seq + count)
    ]


def test_make_when_the_alerts_frame_has_pixels_then_only_frames_from_its_time_are_read(
    tmp_path: Path,
) -> None:
    topics = StubTopics([], frames=frames_every_200ms(0, 100))
    alert = dataclasses.replace(alert_at(T0 + 70 * 200_000), seq=70)
    clip = maker(tmp_path, topics, now_s=T0 / S + 3600).make(alert, 0, 0)
    assert clip.status is ClipStatus.NO_VIDEO and clip.snapshot_uri is not None
    assert topics.frames_read_from == [alert.capture_ts_us // 1000]


def test_make_when_the_alerts_frame_is_still_then_searched_back_to_the_last_full_frame(
    tmp_path: Path,
) -> None:
    # Frames 60-70 are still: the snapshot is frame 59's picture, 2.2 s before the alert.
    topics = StubTopics([], frames=frames_every_200ms(0, 100, still=frozenset(range(60, 71))))
    alert = dataclasses.replace(alert_at(T0 + 70 * 200_000), seq=70)
    clip = maker(tmp_path, topics, now_s=T0 / S + 3600).make(alert, 0, 0)
    assert clip.snapshot_uri is not None, clip.reason
    alert_ms = alert.capture_ts_us // 1000
    assert topics.frames_read_from == [alert_ms, alert_ms - 10_000]  # snapshot_search_s: 10
