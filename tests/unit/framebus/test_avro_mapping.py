"""RecordMapping: a frozen dataclass <-> fastavro's record dicts, from the fields and the schema."""

from __future__ import annotations

import enum
import io
from dataclasses import dataclass
from typing import Any

import fastavro
import pytest

from framebus.avro_mapping import RecordMapping
from framebus.errors import CodecError


class Colour(enum.Enum):
    RED = "red"  # written as its name: the values need not be the symbols
    BLUE = "blue"


@dataclass(frozen=True)
class Point:
    x: float
    y: float


@dataclass(frozen=True)
class Tagged:
    tag: str
    point: Point  # flattened: the record names x and y itself
    weight: int


@dataclass(frozen=True)
class Shape:
    name: str
    colour: Colour
    sizes: tuple[int, ...]
    tags: tuple[Tagged, ...]
    corners: tuple[tuple[float, float], ...]
    counts: tuple[tuple[str, int], ...]
    note: str | None = None
    local: dict[str, str] | None = None  # not on the wire


def record(name: str, fields: list[tuple[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


TAGGED = record("Tagged", [("tag", "string"), ("x", "double"), ("y", "double"), ("weight", "int")])
SHAPE = record(
    "Shape",
    [
        ("name", "string"),
        ("colour", {"type": "enum", "name": "Colour", "symbols": ["RED", "BLUE"]}),
        ("sizes", {"type": "array", "items": "int"}),
        ("tags", {"type": "array", "items": TAGGED}),
        ("corners", {"type": "array", "items": record("Corner", [("u", "float"), ("v", "float")])}),
        ("counts", {"type": "map", "values": "long"}),
        ("note", ["null", "string"]),
    ],
)
VALUE = Shape(
    name="a",
    colour=Colour.BLUE,
    sizes=(3, 4),
    tags=(Tagged("t", Point(1.5, 2.5), 7),),
    corners=((0.0, 1.0), (2.0, 3.0)),
    counts=(("a", 2), ("b", 1)),
    note="n",
)


def through_fastavro(schema: dict[str, Any], rec: dict[str, Any]) -> dict[str, Any]:
    out = io.BytesIO()
    parsed = fastavro.parse_schema(schema)
    fastavro.schemaless_writer(out, parsed, rec)
    read: dict[str, Any] = fastavro.schemaless_reader(io.BytesIO(out.getvalue()), parsed, parsed)
    return read


def test_record_mapping_when_round_tripped_through_fastavro_then_equal() -> None:
    mapping = RecordMapping(Shape, SHAPE)
    rec = mapping.to_avro(VALUE)
    assert rec["colour"] == "BLUE"
    assert rec["tags"] == [{"tag": "t", "x": 1.5, "y": 2.5, "weight": 7}]
    assert rec["corners"] == [{"u": 0.0, "v": 1.0}, {"u": 2.0, "v": 3.0}]
    assert rec["counts"] == {"a": 2, "b": 1}
    assert mapping.from_avro(through_fastavro(SHAPE, rec)) == VALUE


def test_record_mapping_when_map_read_then_pairs_sorted_by_key() -> None:
    read = RecordMapping(Shape, SHAPE).to_avro(VALUE) | {"counts": {"b": 1, "a": 2}}
    assert RecordMapping(Shape, SHAPE).from_avro(read).counts == (("a", 2), ("b", 1))


def test_record_mapping_when_schema_has_a_field_the_dataclass_lacks_then_read_without_it() -> None:
    newer = {**SHAPE, "fields": [*SHAPE["fields"], {"name": "site", "type": "string"}]}
    rec = RecordMapping(Shape, SHAPE).to_avro(VALUE) | {"site": "x"}
    assert RecordMapping(Shape, newer).from_avro(rec) == VALUE


def test_record_mapping_when_enum_symbols_are_not_the_member_names_then_codec_error() -> None:
    schema = {**SHAPE, "fields": [{**f} for f in SHAPE["fields"]]}
    schema["fields"][1]["type"] = {"type": "enum", "name": "Colour", "symbols": ["red", "blue"]}
    with pytest.raises(CodecError, match="Shape.colour: the enum's symbols"):
        RecordMapping(Shape, schema)


def test_record_mapping_when_a_field_without_default_is_not_in_the_schema_then_codec_error() -> (
    None
):
    schema = {**SHAPE, "fields": [f for f in SHAPE["fields"] if f["name"] != "sizes"]}
    with pytest.raises(CodecError, match="Shape.sizes: the schema has no such field"):
        RecordMapping(Shape, schema)


def test_record_mapping_when_a_field_the_schema_lacks_is_not_last_then_codec_error() -> None:
    schema = {**SHAPE, "fields": [f for f in SHAPE["fields"] if f["name"] != "note"]}
    schema["fields"].append(
        {"name": "local", "type": ["null", {"type": "map", "values": "string"}]}
    )
    with pytest.raises(CodecError, match=r"\(note\) come last"):
        RecordMapping(Shape, schema)


def test_record_mapping_when_a_type_has_no_mapping_then_codec_error() -> None:
    schema = {**SHAPE, "fields": [{**f} for f in SHAPE["fields"]]}
    schema["fields"][0]["type"] = record("Name", [("first", "string")])
    with pytest.raises(CodecError, match="Shape.name: framebus.avro_mapping maps no"):
        RecordMapping(Shape, schema)
