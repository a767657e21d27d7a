from __future__ import annotations

from pathlib import Path

from framebus.messages import Alert, Clip, ClipStatus, ZoneAnchor
from framebus_tools.demo.cliptally import ClipTally


def _alert(seq: int) -> Alert:
    return Alert("door", "cam", seq, 100 + seq, 2, 1, (), ZoneAnchor.CENTER, ())


def _clip(seq: int, status: ClipStatus) -> Clip:
    return Clip("door", "cam", seq, 100 + seq, "", 0, seq, status)


def test_clip_tally_when_clips_answer_alerts_then_counted_by_status_and_missing_said(
    tmp_path: Path,
) -> None:
    tally = ClipTally()
    for seq in range(4):
        tally.add_alert(_alert(seq))
    tally.add_clip(_clip(0, ClipStatus.WRITTEN))
    tally.add_clip(_clip(1, ClipStatus.NO_VIDEO))
    tally.add_clip(_clip(1, ClipStatus.NO_VIDEO))  # a replay: one alert, one clip
    tally.add_clip(_clip(2, ClipStatus.WRITTEN))
    tally.add_clip(_clip(9, ClipStatus.WRITTEN))  # an alert the run does not count
    assert tally.by_status() == {"NO_VIDEO": 1, "WRITTEN": 2}
    assert tally.pending() == 1
    assert tally.line(tmp_path / "clips") == (
        f"2 written to {(tmp_path / 'clips').resolve()}, NO_VIDEO 1, "
        "1 alert(s) without a clip record yet"
    )
