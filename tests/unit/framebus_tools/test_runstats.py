import pytest

from framebus.messages import Detections, FrameStatus
from framebus_tools.runstats import RunStats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(seq: int) -> Detections:
    return Detections("cam-1", seq, 1_700_000_000_000_000 + seq, FrameStatus.INFERRED, "m", "1")


def fps_column(table: str) -> float:
    return float(table.splitlines()[2].split()[2])


def test_fps_out_when_records_stopped_then_window_rate_falls_and_whole_run_rate_stays() -> None:
    clock = Clock()
    stats = RunStats(window_s=2.0, clock=clock)
    for seq in range(11):  # 5 records a second for 2 s
        stats.add(record(seq))
        clock.now += 0.2
    clock.now += 10
    assert stats.fps_out("cam-1") == 0.0
    assert stats.fps_out("cam-1", whole_run=True) == pytest.approx(5.0)
    assert fps_column(stats.table()) == 0.0
    assert fps_column(stats.table(whole_run=True)) == 5.0


def test_fps_out_when_one_record_then_whole_run_rate_is_zero() -> None:
    stats = RunStats(clock=Clock())
    stats.add(record(0))
    assert stats.fps_out("cam-1", whole_run=True) == 0.0
