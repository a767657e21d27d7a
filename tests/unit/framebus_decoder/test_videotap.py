from pathlib import Path

import av
import numpy as np

from framebus.messages import VideoPacket
from framebus_decoder.timing import RealtimePacer
from framebus_decoder.videotap import PacketTap, packet_capture_us
from framebus_tools.synthetic import write_h264


def test_packet_capture_time_when_paced_file_then_same_schedule_as_its_frame() -> None:
    pacer = RealtimePacer(epoch_s=lambda: 1000.0)
    # The packet comes before any frame: it starts the file's clock.
    assert packet_capture_us(5.0, pacer, 50.0, lambda: 7) == 1_000_000_000
    assert pacer.wait_s(5.0, now_s=50.01) == 0.0  # its frame, decoded 10 ms later
    assert packet_capture_us(5.04, pacer, 50.02, lambda: 7) == pacer.scheduled_us(5.04)
    assert pacer.scheduled_us(5.04) == 1_000_040_000


def test_packet_capture_time_when_live_source_or_no_pts_then_wall_clock() -> None:
    assert packet_capture_us(5.0, None, 50.0, lambda: 123) == 123
    assert packet_capture_us(None, RealtimePacer(), 50.0, lambda: 123) == 123


def test_packet_tap_when_a_stream_is_tapped_then_every_packet_copied_in_order_in_one_segment(
    tmp_path: Path,
) -> None:
    frames = (np.full((64, 64, 3), 10 * i, np.uint8) for i in range(12))
    path = write_h264(tmp_path / "v.mp4", 64, 64, 25, frames, gop=5)
    taps: list[list[VideoPacket]] = []
    source: list[bytes] = []
    for _ in range(2):  # two opens of the same file: two segments
        records: list[VideoPacket] = []
        tap = PacketTap("cam", records.append, epoch_us=lambda: 42)
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            for packet in container.demux(stream):
                if packet.size:
                    tap(packet, stream, None)
                    source.append(bytes(packet))
                    for _frame in packet.decode():  # decoding after the copy changes nothing
                        pass
        taps.append(records)
    first, second = taps
    assert [r.data for r in first + second] == source
    assert [r.packet_seq for r in first] == list(range(12))
    assert {r.segment for r in first} != {r.segment for r in second}
    assert len({r.segment for r in first}) == 1
    assert [r.keyframe for r in first] == [i % 5 == 0 for i in range(12)]
    assert first[0].extradata and first[1].extradata is None
    assert {r.capture_ts_us for r in first} == {42}
