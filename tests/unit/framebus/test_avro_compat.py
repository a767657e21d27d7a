"""The compatibility check behind the schema gate finds each kind of breaking change, by field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from framebus.codec import load_schema
from tests.unit.framebus.avro_compat import compatibility_problems, sample_records

Schema = dict[str, Any]


def changed(edit: Callable[[Schema], object]) -> Schema:
    """detections.avsc with one edit applied."""
    schema = copy.deepcopy(load_schema("detections"))
    edit(schema)
    return schema


def field(schema: Schema, name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(f for f in schema["fields"] if f["name"] == name)
    return found


def box_field(schema: Schema, name: str) -> dict[str, Any]:
    box: Schema = field(schema, "boxes")["type"]["items"]
    return field(box, name)


def drop(schema: Schema, name: str) -> None:
    schema["fields"] = [f for f in schema["fields"] if f["name"] != name]


# (change, its edit, the direction it breaks, what the message must say)
BREAKING = [
    (
        "field added without a default",
        lambda s: s["fields"].append({"name": "site", "type": "string"}),
        "new reads old",
        "Detections.site: the writer has no such field and the reader gives no default",
    ),
    (
        "field without a default removed",
        lambda s: drop(s, "model_name"),
        "old reads new",
        "Detections.model_name: the writer has no such field",
    ),
    (
        "type changed",
        lambda s: field(s, "seq").update(type="string"),
        "new reads old",
        "Detections.seq: type long cannot be read as string",
    ),
    (
        "type narrowed",
        lambda s: field(s, "frame_offset").update(type="int"),
        "new reads old",
        "Detections.frame_offset: type long cannot be read as int",
    ),
    (
        "type widened",
        lambda s: field(s, "batch_size").update(type="long"),
        "old reads new",
        "Detections.batch_size: type long cannot be read as int",
    ),
    (
        "nested type changed",
        lambda s: box_field(s, "score").update(type="int"),
        "new reads old",
        "Detections.boxes[].score: type float cannot be read as int",
    ),
    (
        "enum symbol removed",
        lambda s: field(s, "status")["type"]["symbols"].remove("FAILED"),
        "new reads old",
        "Detections.status: symbols ['FAILED'] are gone",
    ),
    (
        "enum symbol added",
        lambda s: field(s, "status")["type"]["symbols"].append("SKIPPED"),
        "old reads new",
        "Detections.status: symbols ['SKIPPED'] are gone",
    ),
    (
        "optional field made required",
        lambda s: field(s, "reason").update(type="string", default=""),
        "new reads old",
        "Detections.reason: a written null has nothing to be read as in string",
    ),
    (
        "nested record renamed",
        lambda s: field(s, "boxes")["type"]["items"].update(name="Box2"),
        "new reads old",
        "Detections.boxes[]: record Box became Box2",
    ),
    (
        "logical type changed",
        lambda s: field(s, "capture_ts_us")["type"].update(logicalType="timestamp-millis"),
        "new reads old",
        "Detections.capture_ts_us: logical type timestamp-micros became timestamp-millis",
    ),
    (
        "default of the wrong type",
        lambda s: s["fields"].append({"name": "site", "type": "int", "default": "x"}),
        "new reads old",
        "not a valid schema: Default value <x> must match schema type: int",
    ),
]
COMPATIBLE = [
    (
        "field added with a default",
        lambda s: s["fields"].append({"name": "site", "type": "string", "default": "unknown"}),
    ),
    ("field with a default removed", lambda s: drop(s, "queue_wait_ms")),
    ("doc changed", lambda s: field(s, "seq").update(doc="Another description.")),
    ("field moved", lambda s: s["fields"].reverse()),
]


@pytest.mark.parametrize(
    ("edit", "breaks", "message"), [c[1:] for c in BREAKING], ids=[c[0] for c in BREAKING]
)
def test_compatibility_problems_when_change_breaks_a_direction_then_names_the_field(
    edit: Callable[[Schema], object], breaks: str, message: str
) -> None:
    old, new = load_schema("detections"), changed(edit)
    new_reads_old = compatibility_problems(old, new)
    old_reads_new = compatibility_problems(new, old)
    found = new_reads_old if breaks == "new reads old" else old_reads_new
    assert any(message in p for p in found), found


@pytest.mark.parametrize("edit", [c[1] for c in COMPATIBLE], ids=[c[0] for c in COMPATIBLE])
def test_compatibility_problems_when_change_is_compatible_both_ways_then_none(
    edit: Callable[[Schema], object],
) -> None:
    old, new = load_schema("detections"), changed(edit)
    assert compatibility_problems(old, new) == []
    assert compatibility_problems(new, old) == []


def test_sample_records_when_enums_and_unions_then_every_symbol_and_branch_is_used() -> None:
    samples = sample_records(load_schema("detections"))
    assert {s["status"] for s in samples} == {"INFERRED", "DROPPED_STALE", "FAILED"}
    assert {type(s["reason"]) for s in samples} == {type(None), str}
    assert all(len(s["boxes"]) == 1 for s in samples)
