import pytest

from framebus.sequence import Arrival, arrival


@pytest.mark.parametrize(
    ("last", "seq", "ts", "want"),
    [
        (None, 5, 100, Arrival.FIRST),
        ((5, 100), 6, 110, Arrival.NEXT),
        ((5, 100), 9, 110, Arrival.NEXT),  # after a gap
        ((5, 100), 5, 100, Arrival.REPLAY),
        ((5, 100), 3, 90, Arrival.REPLAY),
        ((5, 100), 0, 200, Arrival.RESTART),  # seq began again, later capture time
        ((5, 100), 5, 101, Arrival.RESTART),
    ],
)
def test_arrival_when_seq_and_capture_time_compared_then_classified(
    last: tuple[int, int] | None, seq: int, ts: int, want: Arrival
) -> None:
    assert arrival(last, seq, ts) is want
