"""Which packets make an alert's clip, and its name."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from framebus.messages import ClipStatus
from framebus_clips.window import (
    ClipWindow,
    NoClip,
    Selection,
    alert_segment,
    clip_name,
    missing_video,
    safe_name,
    select_packets,
)
from tests.unit.framebus.records import ALERT

S = 1_000_000
T0 = 1_700_000_000 * S


@dataclass(frozen=True)
class Mark:
    capture_ts_us: int
    keyframe: bool
    segment: str = "a"


def stream(seconds: int, fps: int = 10, gop: int = 10, start_us: int = T0, segment: str = "a"):
    """`seconds` of packets at `fps`, a keyframe every `gop` packets."""
    step = S // fps
    return [Mark(start_us + i * step, i % gop == 0, segment) for i in range(seconds * fps)]


WINDOW = ClipWindow(alert_ts_us=T0 + 10 * S, pre_roll_us=5 * S, post_roll_us=5 * S)


def times(packets: list[Mark], chosen: Selection | NoClip) -> tuple[int, int]:
    assert isinstance(chosen, Selection), chosen
    return packets[chosen.indices[0]].capture_ts_us, packets[chosen.indices[-1]].capture_ts_us


def test_select_packets_when_video_covers_the_window_then_keyframe_before_to_packet_after() -> None:
    packets = stream(30, gop=7)  # keyframes every 0.7 s: none exactly at the pre-roll's start
    chosen = select_packets(packets, WINDOW)
    first, last = times(packets, chosen)
    assert packets[chosen.indices[0]].keyframe
    assert WINDOW.start_us - 7 * S // 10 < first <= WINDOW.start_us
    assert last == WINDOW.end_us
    assert isinstance(chosen, Selection) and chosen.reason is None
    assert list(chosen.indices) == list(range(chosen.indices[0], chosen.indices[-1] + 1))


def test_select_packets_when_video_starts_after_the_pre_roll_then_first_keyframe_and_said() -> None:
    packets = stream(20, start_us=T0 + 7 * S)[3:]  # begins mid-GOP at 7.3 s
    chosen = select_packets(packets, WINDOW)
    first, _ = times(packets, chosen)
    assert first == T0 + 8 * S  # the first keyframe
    assert isinstance(chosen, Selection) and chosen.reason is not None
    assert "after the pre-roll" in chosen.reason


def test_select_packets_when_video_ends_before_the_post_roll_then_to_the_last_and_said() -> None:
    packets = stream(12)
    chosen = select_packets(packets, WINDOW)
    _, last = times(packets, chosen)
    assert last == packets[-1].capture_ts_us
    assert isinstance(chosen, Selection) and "before the post-roll" in (chosen.reason or "")


def test_select_packets_when_camera_reconnected_then_only_the_alert_segment() -> None:
    # The decoder reconnected at T0 + 8 s: a new segment, with its own keyframes and timestamps.
    old = stream(8, segment="a")
    new = stream(12, start_us=T0 + 8 * S, segment="b")
    packets = old + new
    chosen = select_packets(packets, WINDOW)
    assert isinstance(chosen, Selection)
    assert {packets[i].segment for i in chosen.indices} == {"b"}
    assert packets[chosen.indices[0]].capture_ts_us == T0 + 8 * S
    assert alert_segment(packets, WINDOW.alert_ts_us) == "b"


def test_select_packets_when_no_packet_at_or_before_the_alert_then_no_video() -> None:
    chosen = select_packets(stream(5, start_us=T0 + 11 * S), WINDOW)
    assert isinstance(chosen, NoClip) and chosen.status is ClipStatus.NO_VIDEO
    assert "after the alert" in chosen.reason
    empty = select_packets([], WINDOW)
    assert isinstance(empty, NoClip) and empty.status is ClipStatus.NO_VIDEO


def test_select_packets_when_segment_has_no_keyframe_then_no_video() -> None:
    packets = [dataclasses.replace(p, keyframe=False) for p in stream(20)]
    chosen = select_packets(packets, WINDOW)
    assert isinstance(chosen, NoClip) and "no keyframe" in chosen.reason


def test_missing_video_when_topic_starts_after_an_alert_older_than_retention_then_aged_out() -> (
    None
):
    now = WINDOW.alert_ts_us + 3600 * S
    aged = missing_video(WINDOW, WINDOW.alert_ts_us + 60 * S, now, 3600 * S)
    assert aged.status is ClipStatus.VIDEO_AGED_OUT
    assert "keeps 3600 s" in aged.reason


def test_missing_video_when_alert_recent_or_topic_empty_then_no_video() -> None:
    now = WINDOW.alert_ts_us + 60 * S
    assert missing_video(WINDOW, WINDOW.alert_ts_us + S, now, 3600 * S).status is (
        ClipStatus.NO_VIDEO
    )
    assert missing_video(WINDOW, None, now + 7200 * S, 3600 * S).status is ClipStatus.NO_VIDEO


def test_clip_name_when_same_alert_then_same_name_sorting_by_capture_time() -> None:
    name = clip_name(ALERT)
    assert name == clip_name(dataclasses.replace(ALERT, fired_at_us=ALERT.fired_at_us + 5))
    assert name == "20231114T221320.123456Z_door-line_cam-1-1700000000-7"
    later = dataclasses.replace(ALERT, capture_ts_us=ALERT.capture_ts_us + 1)
    assert clip_name(later) > name
    assert clip_name(dataclasses.replace(ALERT, track_id="")).endswith("_door-line_seq42")


def test_safe_name_when_path_characters_then_one_component() -> None:
    assert safe_name("../../etc/passwd") == "etc-passwd"
    assert safe_name("lobby cam #2") == "lobby-cam-2"
    assert safe_name("..") == "_"
