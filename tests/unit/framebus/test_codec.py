import copy
import io
from datetime import UTC, datetime

import fastavro
import pytest

from framebus.codec import (
    HEADER_BYTES,
    FrameCodec,
    SingleObjectCodec,
    TracksCodec,
    load_schema,
    parse_plain,
    schema_fingerprint,
)
from framebus.errors import CodecError, UnknownSchemaError
from framebus.messages import (
    Box,
    Compression,
    Frame,
    FrameStatus,
    TensorLayout,
    TrackedObject,
    Tracks,
)


def sample_frame() -> Frame:
    return Frame(
        camera_id="cam-1",
        seq=42,
        capture_ts_us=1_700_000_000_123_456,
        orig_width=1920,
        orig_height=1080,
        shape=(640, 640, 3),
        layout=TensorLayout.HWC,
        scale=1 / 3,
        pad_x=0,
        pad_y=140,
        tensor=bytes(range(256)) * 4,
        compression=Compression.LZ4,
        pts_s=1.68,
    )


def test_frame_codec_when_round_tripped_then_equal_and_single_object_framed() -> None:
    codec = FrameCodec()
    data = codec.encode(sample_frame())
    assert data[:2] == b"\xc3\x01"
    assert data[2:HEADER_BYTES] == schema_fingerprint(load_schema("frame"))
    assert codec.decode(data) == sample_frame()


def test_schema_fingerprint_when_primitive_int_then_matches_avro_spec_value() -> None:
    # The Avro specification's CRC-64-AVRO of the schema "int" is 0x7275d51a3f395c8f;
    # single-object encoding writes it little-endian.
    assert schema_fingerprint("int") == (0x7275D51A3F395C8F).to_bytes(8, "little")


def test_codec_when_reader_schema_has_new_defaulted_field_then_reads_old_records() -> None:
    old = load_schema("frame")
    new = copy.deepcopy(old)
    new["fields"].append({"name": "site", "type": "string", "default": "unknown"})
    old_bytes = SingleObjectCodec(old).encode(
        FrameCodec()._codec.decode(FrameCodec().encode(sample_frame()))
    )
    reader = SingleObjectCodec(new, older_schemas=[old])
    record = reader.decode(old_bytes)
    assert record["site"] == "unknown"
    assert record["camera_id"] == "cam-1"


def test_codec_when_fingerprint_unknown_then_raises_clear_error() -> None:
    data = bytearray(FrameCodec().encode(sample_frame()))
    data[2:HEADER_BYTES] = b"\x01" * 8
    with pytest.raises(UnknownSchemaError, match="unknown schema fingerprint 0101010101010101"):
        FrameCodec().decode(bytes(data))


@pytest.mark.parametrize("data", [b"", b"garbage bytes", b"\xc3\x01"])
def test_codec_when_not_single_object_then_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError, match="C3 01"):
        FrameCodec().decode(data)


def test_codec_when_body_truncated_then_codec_error() -> None:
    data = FrameCodec().encode(sample_frame())
    with pytest.raises(CodecError, match="corrupt"):
        FrameCodec().decode(data[:40])


def test_frame_codec_decode_view_when_current_schema_then_equal_and_tensor_is_a_view() -> None:
    codec = FrameCodec()
    data = codec.encode(sample_frame())
    frame = codec.decode_view(data)
    assert isinstance(frame.tensor, memoryview)
    assert frame.tensor.obj is data  # a view into the record, not a copy
    assert frame == codec.decode(data)  # memoryview == bytes compares the contents
    assert frame.camera_id == sample_frame().camera_id
    assert bytes(frame.tensor) == sample_frame().tensor


def test_frame_codec_decode_view_when_tensor_length_disagrees_then_codec_error() -> None:
    data = FrameCodec().encode(sample_frame())
    with pytest.raises(CodecError, match="tensor of"):
        FrameCodec().decode_view(data + b"\x00")


def test_frame_codec_decode_view_when_head_is_truncated_then_codec_error() -> None:
    data = FrameCodec().encode(sample_frame())
    with pytest.raises(CodecError):
        FrameCodec().decode_view(data[:20])


def sample_tracks() -> Tracks:
    box = Box(10.5, 20.0, 110.0, 220.0, 0, "person", 0.875)
    person = TrackedObject("cam-1/1700000000/7", box, 1_700_000_000_000_001, True, 4)
    return Tracks(
        "cam-1",
        42,
        1_700_000_000_123_456,
        FrameStatus.INFERRED,
        (person,),
        tracked_at_us=1_700_000_000_223_456,
    )


def test_codecs_when_timestamps_coded_then_same_bytes_as_a_logical_type_aware_writer() -> None:
    # The codecs leave logical types out of what fastavro parses; the wire must not notice.
    schema = load_schema("tracks")
    data = TracksCodec().encode(sample_tracks())
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
    tracks = TracksCodec().decode(TracksCodec().encode(sample_tracks()))
    assert tracks == sample_tracks()
    stamps = (tracks.capture_ts_us, tracks.tracked_at_us, tracks.objects[0].first_seen_us)
    assert all(type(stamp) is int for stamp in stamps)
