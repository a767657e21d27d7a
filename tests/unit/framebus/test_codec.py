import copy
import dataclasses
import io
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest

from framebus.codec import (
    HEADER_BYTES,
    AlertCodec,
    DetectionsCodec,
    FrameCodec,
    SingleObjectCodec,
    TracksCodec,
    load_schema,
    parse_plain,
    released_versions,
    schema_fingerprint,
)
from framebus.errors import CodecError, UnknownSchemaError
from framebus.messages import Alert, Detections, Frame, FrameStatus, Tracks
from tests.unit.framebus.records import ALERT, DETECTIONS, FRAME, TRACKS


def test_frame_codec_when_round_tripped_then_equal_and_single_object_framed() -> None:
    codec = FrameCodec()
    data = codec.encode(FRAME)
    assert data[:2] == b"\xc3\x01"
    assert data[2:HEADER_BYTES] == schema_fingerprint(load_schema("frame"))
    assert codec.decode(data) == FRAME


def test_schema_fingerprint_when_primitive_int_then_matches_avro_spec_value() -> None:
    # The Avro specification's CRC-64-AVRO of the schema "int" is 0x7275d51a3f395c8f;
    # single-object encoding writes it little-endian.
    assert schema_fingerprint("int") == (0x7275D51A3F395C8F).to_bytes(8, "little")


def test_codec_when_reader_schema_has_new_defaulted_field_then_reads_old_records() -> None:
    old = load_schema("frame")
    new = copy.deepcopy(old)
    new["fields"].append({"name": "site", "type": "string", "default": "unknown"})
    old_bytes = SingleObjectCodec(old).encode(
        FrameCodec()._codec.decode(FrameCodec().encode(FRAME))
    )
    reader = SingleObjectCodec(new, older_schemas=[old])
    record = reader.decode(old_bytes)
    assert record["site"] == "unknown"
    assert record["camera_id"] == "cam-1"


def test_codec_when_fingerprint_unknown_then_raises_clear_error() -> None:
    data = bytearray(FrameCodec().encode(FRAME))
    data[2:HEADER_BYTES] = b"\x01" * 8
    with pytest.raises(UnknownSchemaError, match="unknown schema fingerprint 0101010101010101"):
        FrameCodec().decode(bytes(data))


@pytest.mark.parametrize("data", [b"", b"garbage bytes", b"\xc3\x01"])
def test_codec_when_not_single_object_then_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError, match="C3 01"):
        FrameCodec().decode(data)


def test_codec_when_body_truncated_then_codec_error() -> None:
    data = FrameCodec().encode(FRAME)
    with pytest.raises(CodecError, match="corrupt"):
        FrameCodec().decode(data[:40])


def test_frame_codec_decode_view_when_current_schema_then_equal_and_tensor_is_a_view() -> None:
    codec = FrameCodec()
    data = codec.encode(FRAME)
    frame = codec.decode_view(data)
    assert isinstance(frame.tensor, memoryview)
    assert frame.tensor.obj is data  # a view into the record, not a copy
    assert frame == codec.decode(data)  # memoryview == bytes compares the contents
    assert frame.camera_id == FRAME.camera_id
    assert bytes(frame.tensor) == FRAME.tensor


def test_frame_codec_decode_view_when_tensor_length_disagrees_then_codec_error() -> None:
    data = FrameCodec().encode(FRAME)
    with pytest.raises(CodecError, match="tensor of"):
        FrameCodec().decode_view(data + b"\x00")


def test_frame_codec_decode_view_when_head_is_truncated_then_codec_error() -> None:
    data = FrameCodec().encode(FRAME)
    with pytest.raises(CodecError):
        FrameCodec().decode_view(data[:20])


def test_codecs_when_timestamps_coded_then_same_bytes_as_a_logical_type_aware_writer() -> None:
    # The codecs leave logical types out of what fastavro parses; the wire must not notice.
    schema = load_schema("tracks")
    data = TracksCodec().encode(TRACKS)
    aware = fastavro.parse_schema(schema)
    body = fastavro.schemaless_reader(io.BytesIO(data[HEADER_BYTES:]), aware)
    assert body["capture_ts_us"] == datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    written = io.BytesIO()
    fastavro.schemaless_writer(written, aware, body)
    assert written.getvalue() == data[HEADER_BYTES:]
    assert (
        data[2:HEADER_BYTES]
        == schema_fingerprint(schema)
        == schema_fingerprint(parse_plain(schema))
    )


def test_codecs_when_decoded_then_timestamps_are_integer_microseconds() -> None:
    tracks = TracksCodec().decode(TracksCodec().encode(TRACKS))
    assert tracks == TRACKS
    stamps = (tracks.capture_ts_us, tracks.tracked_at_us, tracks.objects[0].first_seen_us)
    assert all(type(stamp) is int for stamp in stamps)


# The bytes the field-by-field codecs of 7b1f100 wrote for the records of `records.py` (the frame
# with its v3 schema): how a record maps to Avro must not change the wire. A schema change changes
# these bytes (its fingerprint is in them): only then are they written again.
PINNED: list[tuple[Any, Frame | Detections | Tracks | Alert, str]] = [
    (
        FrameCodec(),
        FRAME,
        "c30102db cb571ca2 e7bb0a63 616d2d31 54808981 82838985 0602e17a 14ae47e1 fa3f801e "
        "f0100408 08000a75 696e7438 02555555 555555d5 3f020404 04040400 30000102 03040506 "
        "0708090a 0b0c0d0e 0f101112 13141516 17",
    ),
    (
        DetectionsCodec(),
        DETECTIONS,
        "c301f427 8de7b444 ad4c0a63 616d2d31 54808981 82838985 0602020a 7374616c 65000879 "
        "6f6c6f08 386e2d32 801ef010 04000028 410000a2 410000dc 4200805c 43040663 61720000 "
        "403f0000 00000000 803f0000 20400000 4040000c 70657273 6f6e0000 003f0000 00000000 "
        "000c4000 00000000 80284010 00000000 00404440 06a413",
    ),
    (
        TracksCodec(),
        TRACKS,
        "c3011d98 0736f568 85350a63 616d2d31 54808981 82838985 06000000 0408796f 6c6f0838 "
        "6e2d3280 1ef01004 2463616d 2d312f31 37303030 30303030 302f3700 00284100 00a24100 "
        "00dc4200 805c4304 06636172 0000403f 8280f281 83898506 01080024 63616d2d 312f3137 "
        "30303030 30303030 2f380000 00000000 803f0000 20400000 4040000c 70657273 6f6e0000 "
        "003fc29a fe818389 85060002 00000000 000000c0 4440c0a3 8d828389 850602c6 01",
    ),
    (
        AlertCodec(),
        ALERT,
        "c301c59d fe9547cd b0061264 6f6f722d 6c696e65 0a63616d 2d315480 89818283 898506c0 "
        "a38d8283 8985060a 06000000 00000000 00000000 00000000 00000000 00000059 40000000 "
        "00000000 00000000 00000059 40000000 00004049 40000202 00002841 0000a241 0000dc42 "
        "00805c43 04066361 72000040 3f000879 6f6c6f08 386e2d32 02c60108 2463616d 2d312f31 "
        "37303030 30303030 302f3704 00000000 00000440 040c6361 723a494e 060e6361 723a4f55 "
        "540200",
    ),
]


@pytest.mark.parametrize(
    ("codec", "value", "wire"), PINNED, ids=[type(v).__name__ for _, v, _ in PINNED]
)
def test_codecs_when_encoding_then_bytes_equal_the_pinned_wire_bytes(
    codec: Any, value: Frame | Detections | Tracks | Alert, wire: str
) -> None:
    assert codec.encode(value).hex() == bytes.fromhex(wire).hex()  # hex: a readable diff
    assert codec.decode(bytes.fromhex(wire)) == value


@pytest.mark.parametrize("value", [DETECTIONS, TRACKS], ids=["detections", "tracks"])
def test_still_status_when_encoded_then_read_back_as_still_and_as_dropped_by_released_v1(
    value: Detections | Tracks,
) -> None:
    codec: Any = DetectionsCodec() if isinstance(value, Detections) else TracksCodec()
    still = dataclasses.replace(value, status=FrameStatus.STILL, reason=None)
    data = codec.encode(still)
    assert codec.decode(data) == dataclasses.replace(still, reason="still")
    name = "detections" if isinstance(value, Detections) else "tracks"
    (v1,) = (v.schema for v in released_versions(name) if v.version == 1)
    old_reader = SingleObjectCodec(v1, older_schemas=[load_schema(name)])
    seen = old_reader.decode(data)  # a reader from before `still`: a frame not looked at
    assert (seen["status"], seen["reason"]) == ("DROPPED_STALE", "still")


def test_frame_codec_when_still_frame_then_empty_tensor_and_flag_round_trip() -> None:
    still = dataclasses.replace(FRAME, tensor=b"", still=True)
    read = FrameCodec().decode_view(FrameCodec().encode(still))
    assert read.still and bytes(read.tensor) == b""
