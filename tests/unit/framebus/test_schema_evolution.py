"""Records of one release read by another, for every record type (frame, ..., video, clip).

The promise (docs/architecture.md, "Schema evolution"): readers are upgraded before writers. A
release reads the records of every earlier release, new fields taking their defaults; a record of a
later release is refused as an unknown schema (and dead-lettered by the services), because Avro
single-object encoding carries only the writer schema's fingerprint, not the schema. The next
release is simulated by a schemas folder whose schema adds a field with a default.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from framebus.codec import (
    RELEASED_DIR,
    AlertCodec,
    ClipCodec,
    DetectionsCodec,
    FrameCodec,
    SingleObjectCodec,
    TracksCodec,
    VideoPacketCodec,
    load_schema,
    released_versions,
)
from framebus.errors import UnknownSchemaError
from framebus.messages import (
    Alert,
    Clip,
    ColourMatrix,
    ColourRange,
    Detections,
    Frame,
    PixelFormat,
    Tracks,
    VideoPacket,
)
from tests.unit.framebus.records import ALERT, CLIP, DETECTIONS, FRAME, TRACKS, VIDEO

# The field the simulated next release adds, with the default an old record reads as.
NEW_FIELD = {"name": "site", "type": "string", "default": "unknown", "doc": "Site of the camera."}


@dataclass(frozen=True)
class Record:
    """One record type: its schema name, its codec class and a sample value."""

    name: str
    codec: Callable[..., Any]
    sample: Frame | Detections | Tracks | Alert | VideoPacket | Clip


RECORDS = [
    Record("frame", FrameCodec, FRAME),
    Record("detections", DetectionsCodec, DETECTIONS),
    Record("tracks", TracksCodec, TRACKS),
    Record("alert", AlertCodec, ALERT),
    Record("video", VideoPacketCodec, VIDEO),
    Record("clip", ClipCodec, CLIP),
]
BY_NAME = {r.name: r for r in RECORDS}


def next_version(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as the next release would ship it: one more field, with a default."""
    nxt = copy.deepcopy(dict(schema))
    # Before the last field: a frame's `tensor` must stay last (FrameCodec.decode_view).
    nxt["fields"].insert(len(nxt["fields"]) - 1, NEW_FIELD)
    return nxt


def release(
    root: Path, name: str, writes: Mapping[str, Any], released: list[Mapping[str, Any]]
) -> Path:
    """A schemas folder as a release ships it: the schema it writes and every released version."""
    (root / RELEASED_DIR / name).mkdir(parents=True)
    (root / f"{name}.avsc").write_text(json.dumps(writes), encoding="utf-8")
    for number, schema in enumerate(released, start=1):
        path = root / RELEASED_DIR / name / f"v{number}.avsc"
        path.write_text(json.dumps(schema), encoding="utf-8")
    return root


@dataclass(frozen=True)
class Releases:
    """Codecs of this release and of the simulated next one, and the next one's schema."""

    this: Any
    next: Any
    next_schema: dict[str, Any]


@pytest.fixture(params=RECORDS, ids=lambda r: r.name)
def record(request: pytest.FixtureRequest) -> Record:
    rec: Record = request.param
    return rec


@pytest.fixture
def releases(tmp_path: Path, record: Record) -> Releases:
    shipped = [v.schema for v in released_versions(record.name)]
    nxt = next_version(load_schema(record.name))
    this_dir = release(tmp_path / "this", record.name, load_schema(record.name), shipped)
    next_dir = release(tmp_path / "next", record.name, nxt, [*shipped, nxt])
    return Releases(record.codec(this_dir), record.codec(next_dir), nxt)


def test_codec_when_next_release_reads_a_record_of_this_release_then_equal_and_new_field_defaulted(
    record: Record, releases: Releases
) -> None:
    data = releases.this.encode(record.sample)
    assert releases.next.decode(data) == record.sample
    # The next release's own record type would carry the field: the Avro record has its default.
    assert releases.next._codec.decode(data)["site"] == "unknown"


def test_codec_when_this_release_reads_a_record_of_the_next_release_then_unknown_schema_error(
    record: Record, releases: Releases
) -> None:
    data = releases.next.encode(record.sample)
    with pytest.raises(UnknownSchemaError, match="readers are upgraded before writers"):
        releases.this.decode(data)


def test_codec_when_given_the_next_release_schema_as_a_writer_then_reads_its_records(
    record: Record, releases: Releases
) -> None:
    # Why the gate (test_schema_gate.py) also checks this direction: the schemas stay readable
    # both ways, so all an old reader lacks is the newer writer's schema.
    current = load_schema(record.name)
    old_reader = SingleObjectCodec(current, older_schemas=[releases.next_schema])
    read = old_reader.decode(releases.next.encode(record.sample))
    assert "site" not in read
    assert read == SingleObjectCodec(current).decode(releases.this.encode(record.sample))


def test_frame_codec_decode_view_when_record_of_an_older_release_then_full_decode_equal(
    tmp_path: Path,
) -> None:
    shipped = [v.schema for v in released_versions("frame")]
    nxt = next_version(load_schema("frame"))
    new = FrameCodec(release(tmp_path, "frame", nxt, [*shipped, nxt]))
    frame = new.decode_view(FrameCodec().encode(FRAME))
    assert frame == FRAME


# Every released version of every record type, each against the current schema, both ways.
RELEASED = [(r.name, v.version) for r in RECORDS for v in released_versions(r.name)]


def released_case(name: str, version: int) -> tuple[Record, Any, Mapping[str, Any]]:
    """The record type, this release's codec of it, and the released version's schema."""
    (old,) = (v.schema for v in released_versions(name) if v.version == version)
    return BY_NAME[name], BY_NAME[name].codec(), old


@pytest.mark.parametrize(("name", "version"), RELEASED)
def test_codec_when_record_written_with_a_released_version_then_current_codec_reads_it(
    name: str, version: int
) -> None:
    rec, codec, old = released_case(name, version)
    written = codec._codec.decode(codec.encode(rec.sample))  # the sample as an Avro record
    data = SingleObjectCodec(old).encode(written)
    read = codec._codec.decode(data)
    old_fields = {f["name"] for f in old["fields"]}
    for field in load_schema(name)["fields"]:
        expected = written[field["name"]] if field["name"] in old_fields else field["default"]
        assert read[field["name"]] == expected, field["name"]
    codec.decode(data)  # and it becomes a domain value


@pytest.mark.parametrize(("name", "version"), RELEASED)
def test_codec_when_a_released_version_reads_a_record_of_the_current_schema_then_fields_equal(
    name: str, version: int
) -> None:
    # The other way round: a reader of that release, handed the current schema, reads the
    # current release's records, each field it knows as written.
    rec, codec, old = released_case(name, version)
    data = codec.encode(rec.sample)
    written = codec._codec.decode(data)
    read = SingleObjectCodec(old, older_schemas=[load_schema(name)]).decode(data)
    assert read == projected(written, old)


def projected(value: Any, schema: Any) -> Any:
    """`value` (an Avro datum) with only the record fields `schema` names, nested records too."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "record":
        return {f["name"]: projected(value[f["name"]], f["type"]) for f in schema["fields"]}
    if kind == "array":
        return [projected(item, schema["items"]) for item in value]
    return value


def test_frame_codec_when_record_of_frame_v1_then_read_as_rgb_bt601_limited() -> None:
    (v1,) = (v.schema for v in released_versions("frame") if v.version == 1)
    rgb = dataclasses.replace(
        FRAME,
        pixel_format=PixelFormat.RGB,
        colour_matrix=ColourMatrix.BT601,
        colour_range=ColourRange.LIMITED,
    )
    written = FrameCodec()._codec.decode(FrameCodec().encode(rgb))
    old_fields = {f["name"] for f in v1["fields"]}
    data = SingleObjectCodec(v1).encode({k: v for k, v in written.items() if k in old_fields})
    assert FrameCodec().decode(data) == rgb
    assert FrameCodec().decode_view(data) == rgb


@pytest.mark.parametrize(
    ("field", "symbol", "unknown"),
    [
        ("pixel_format", "NV12", PixelFormat.UNKNOWN),
        ("colour_matrix", "BT2020", ColourMatrix.UNKNOWN),
        ("colour_range", "STUDIO", ColourRange.UNKNOWN),
    ],
)
def test_frame_codec_when_a_later_release_writes_a_symbol_this_one_lacks_then_unknown(
    tmp_path: Path, field: str, symbol: str, unknown: enum.Enum
) -> None:
    # A later release adds a pixel format, matrix or range; a reader handed its schema reads the
    # symbol as the enum's default, UNKNOWN, which the services dead-letter: never as RGB, BT.601
    # or limited, which would be read wrong without a word.
    nxt = copy.deepcopy(load_schema("frame"))
    (enum_type,) = (f["type"] for f in nxt["fields"] if f["name"] == field)
    enum_type["symbols"].append(symbol)
    writer = SingleObjectCodec(nxt)
    record = FrameCodec()._codec.decode(FrameCodec().encode(FRAME))
    data = writer.encode({**record, field: symbol})
    reader = FrameCodec(release(tmp_path, "frame", load_schema("frame"), [nxt]))
    assert getattr(reader.decode(data), field) is unknown
