import json

import pytest

from framebus.errors import CodecError
from framebus.kafka.changelog import decode_state, encode_state


def test_changelog_value_when_round_tripped_then_state_and_source_kept() -> None:
    state = {"v": 1, "tracks": [{"id": "cam/1/2", "x": 0.1 + 0.2}], "next": 3}
    stored = decode_state("cam", encode_state(state, "dets", 2, 41))
    assert (stored.key, stored.source_topic, stored.source_partition, stored.source_offset) == (
        "cam",
        "dets",
        2,
        41,
    )
    assert stored.state == state  # floats survive JSON exactly


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        json.dumps({"v": 2, "source": ["t", 0, 1], "state": {}}).encode(),
        json.dumps({"v": 1, "source": ["t", 0], "state": {}}).encode(),
        json.dumps({"v": 1, "source": ["t", 0, 1], "state": []}).encode(),
    ],
)
def test_changelog_value_when_not_a_state_record_then_codec_error_names_the_key(
    value: bytes,
) -> None:
    with pytest.raises(CodecError, match="cam-9"):
        decode_state("cam-9", value)


def test_changelog_value_when_state_holds_nan_then_refused_before_it_is_written() -> None:
    with pytest.raises(ValueError):
        encode_state({"x": float("nan")}, "t", 0, 0)
