"""Packets to MP4 without re-encoding, on a generated H.264 file."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import av
import pytest

from framebus.messages import VideoPacket
from framebus.videopackets import demux_file
from framebus_clips.remux import ClipWriteError, write_atomically, write_mp4
from tests.conftest import GopVideo
from tests.h264 import length_prefixed


def test_write_mp4_when_packets_from_a_keyframe_then_same_bytes_size_and_rate(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", 0))[gop_video.gop : 3 * gop_video.gop + 5]
    out = tmp_path / "cam-1" / "clip.mp4"
    size = write_mp4(packets, out)
    assert size == out.stat().st_size > 0
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.width, stream.height) == ("h264", 320, 240)
        assert stream.average_rate == gop_video.fps
        assert [bytes(p) for p in container.demux(stream) if p.size] == [p.data for p in packets]
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == len(packets)
    assert list(out.parent.iterdir()) == [out]  # the temporary file is renamed, not left


def annexb_packets(path: Path) -> list[VideoPacket]:
    """The file's packets as an RTSP camera sends them: Annex-B, SPS/PPS in band, no extradata."""
    packets = list(demux_file(path, "cam-1", 0))
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        annexb = av.bitstream.BitStreamFilterContext("h264_mp4toannexb", stream)
        data = [bytes(out) for p in container.demux(stream) if p.size for out in annexb.filter(p)]
    return [
        dataclasses.replace(p, data=d, extradata=None) for p, d in zip(packets, data, strict=True)
    ]


def test_write_mp4_when_annexb_packets_without_extradata_then_sps_pps_from_the_keyframe(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = annexb_packets(gop_video.path)[gop_video.gop : 2 * gop_video.gop + 3]
    assert packets[0].data.startswith(b"\x00\x00\x00\x01")
    out = tmp_path / "clip.mp4"
    write_mp4(packets, out)
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        assert stream.codec_context.extradata  # avcC, built from the keyframe's SPS and PPS
        got = [bytes(p) for p in container.demux(stream) if p.size]
    assert got == [length_prefixed(p.data) for p in packets]  # only the NAL framing changed
    with av.open(str(out)) as container:
        assert sum(1 for _ in container.decode(video=0)) == len(packets)


def test_write_mp4_when_written_again_then_replaced_in_place(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", 0))
    out = tmp_path / "clip.mp4"
    write_mp4(packets[: gop_video.gop], out)
    write_mp4(packets[: 2 * gop_video.gop], out)
    with av.open(str(out)) as container:
        assert sum(1 for p in container.demux(video=0) if p.size) == 2 * gop_video.gop
    assert [p.name for p in tmp_path.iterdir()] == ["clip.mp4"]


def test_write_mp4_when_codec_unknown_or_no_packets_then_clip_write_error(
    gop_video: GopVideo, tmp_path: Path
) -> None:
    packets = list(demux_file(gop_video.path, "cam-1", 0))[: gop_video.gop]
    with pytest.raises(ClipWriteError, match="no packets"):
        write_mp4([], tmp_path / "none.mp4")
    wrong = [dataclasses.replace(p, codec="no-such-codec") for p in packets]
    with pytest.raises(ClipWriteError, match="cannot write"):
        write_mp4(wrong, tmp_path / "wrong.mp4")
    assert list(tmp_path.iterdir()) == []


def test_write_atomically_when_written_then_whole_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "a" / "snap.jpg"
    assert write_atomically(path, b"jpeg") == 4
    assert path.read_bytes() == b"jpeg"
    assert [p.name for p in path.parent.iterdir()] == ["snap.jpg"]
