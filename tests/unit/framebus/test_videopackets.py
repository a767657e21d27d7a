"""Demuxed packets as VideoPacket records, on a generated H.264 file."""

from __future__ import annotations

from pathlib import Path

import av
import pytest

from framebus.codec import VideoPacketCodec
from framebus.videopackets import VideoFileError, demux_file, kafka_timestamp_ms
from tests.conftest import GopVideo

START_US = 1_700_000_000_000_000


def test_demux_file_when_h264_file_then_one_record_per_packet_with_its_bytes(
    gop_video: GopVideo,
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", START_US, segment="seg-1"))
    with av.open(str(gop_video.path)) as container:
        source = [bytes(p) for p in container.demux(video=0) if p.size]
    assert [p.data for p in packets] == source
    assert [p.packet_seq for p in packets] == list(range(len(source)))
    assert {(p.camera_id, p.segment, p.codec) for p in packets} == {("cam-1", "seg-1", "h264")}
    assert {(p.width, p.height, p.frame_rate_num, p.frame_rate_den) for p in packets} == {
        (320, 240, gop_video.fps, 1)
    }


def test_demux_file_when_fixed_gop_then_keyframes_carry_the_codec_parameters(
    gop_video: GopVideo,
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", START_US))
    keyframes = [p.packet_seq for p in packets if p.keyframe]
    assert keyframes == list(range(0, gop_video.frames, gop_video.gop))
    assert all(p.extradata for p in packets if p.keyframe)
    assert not any(p.extradata for p in packets if not p.keyframe)


def test_demux_file_when_start_given_then_capture_time_is_start_plus_pts_seconds(
    gop_video: GopVideo,
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", START_US))
    step_us = 1_000_000 // gop_video.fps
    assert [p.capture_ts_us for p in packets] == [
        START_US + i * step_us for i in range(len(packets))
    ]
    assert kafka_timestamp_ms(packets[1]) == (START_US + step_us) // 1000
    first = packets[0]
    assert first.pts is not None
    assert first.time_base_num / first.time_base_den * first.pts == 0


def test_demux_file_when_records_encoded_then_decoded_equal(gop_video: GopVideo) -> None:
    codec = VideoPacketCodec()
    packets = list(demux_file(gop_video.path, "cam-1", START_US))
    assert [codec.decode(codec.encode(p)) for p in packets] == packets


def test_demux_file_when_not_a_video_then_video_file_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"not a video at all")
    with pytest.raises(VideoFileError, match="cannot open"):
        list(demux_file(junk, "cam-1", START_US))
