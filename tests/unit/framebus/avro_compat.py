"""Can records written with one Avro schema be read with another? Answers naming the field.

Two checks, because each misses what the other sees: a walk over both schemas, which follows the
Avro specification's resolution rules and names the field of each problem (fastavro's own errors
often do not: "Schema mismatch: long is not string"), and a real write-then-read of deterministic
sample records through fastavro, so that a rule the walk gets wrong still fails.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, expand_schema

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
# What a writer's type may be read as (Avro specification, "Schema Resolution").
PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


def compatibility_problems(writer: Mapping[str, Any], reader: Mapping[str, Any]) -> list[str]:
    """Why records written with `writer` cannot be read with `reader`, one line each; [] if none."""
    try:
        # Parsing also checks that each default is a value of its field's type.
        w, r = expand_schema(dict(writer)), expand_schema(dict(reader))
    except SchemaParseException as exc:
        return [f"not a valid schema: {exc}"]
    problems: list[str] = []
    _check(w, r, _short(r["name"]), problems)
    if not problems:  # the walk's rules missed something fastavro trips on
        problems = _read_samples(w, r)
    return problems


def sample_records(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Deterministic records of `schema` that, together, use every enum symbol and union branch."""
    expanded = expand_schema(dict(schema))
    return [_sample(expanded, k) for k in range(max(2, _widest(expanded)))]


def _read_samples(writer: Any, reader: Any) -> list[str]:
    parsed_w, parsed_r = fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    for record in sample_records(writer):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed_w, record)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, parsed_w, parsed_r)
        except Exception as exc:  # any failure to read is the finding
            return [f"fastavro cannot read sample record {record!r}: {type(exc).__name__}: {exc}"]
    return []


def _check(w: Any, r: Any, path: str, out: list[str]) -> None:
    if isinstance(w, list) or isinstance(r, list):
        _check_union(w, r, path, out)
        return
    wt, rt = _type(w), _type(r)
    if _logical(w) != _logical(r):
        # The bytes may still resolve, but the value means something else.
        out.append(f"{path}: logical type {_logical(w)} became {_logical(r)}")
    if wt != rt:
        if not (wt in PRIMITIVES and rt in PROMOTIONS.get(wt, set())):
            out.append(f"{path}: type {_describe(w)} cannot be read as {_describe(r)}")
        return
    if wt in ("record", "enum", "fixed") and not _same_name(w, r):
        out.append(f"{path}: {wt} {_short(w['name'])} became {_short(r['name'])}")
    elif wt == "record":
        _check_record(w, r, path, out)
    elif wt == "enum":
        lost = [s for s in w["symbols"] if s not in r["symbols"]]
        if lost and "default" not in r:
            out.append(f"{path}: symbols {lost} are gone and the enum has no default")
    elif wt == "fixed" and w["size"] != r["size"]:
        out.append(f"{path}: fixed size {w['size']} became {r['size']}")
    elif wt == "array":
        _check(w["items"], r["items"], f"{path}[]", out)
    elif wt == "map":
        _check(w["values"], r["values"], f"{path}{{}}", out)


def _check_record(w: Any, r: Any, path: str, out: list[str]) -> None:
    written = {f["name"]: f for f in w["fields"]}
    for field in r["fields"]:
        name = field["name"]
        match = next(
            (written[n] for n in (name, *field.get("aliases", ())) if n in written),
            None,
        )
        where = f"{path}.{name}"
        if match is not None:
            _check(match["type"], field["type"], where, out)
        elif "default" not in field:
            out.append(f"{where}: the writer has no such field and the reader gives no default")


def _check_union(w: Any, r: Any, path: str, out: list[str]) -> None:
    branches = r if isinstance(r, list) else [r]
    for branch in w if isinstance(w, list) else [w]:
        target = _pick(branch, branches)
        if target is None:
            out.append(
                f"{path}: a written {_describe(branch)} has nothing to be read as in {_describe(r)}"
            )
        else:
            _check(branch, target, path, out)


def _pick(branch: Any, branches: list[Any]) -> Any:
    """The reader branch a written branch resolves to: the same type first, then a promotion."""
    t = _type(branch)
    same = [b for b in branches if _type(b) == t]
    if t in ("record", "enum", "fixed"):
        same = [b for b in same if _same_name(branch, b)]
    promoted = [b for b in branches if _type(b) in PROMOTIONS.get(t, set())]
    return next(iter(same + promoted), None)


def _sample(s: Any, k: int) -> Any:
    if isinstance(s, list):
        return _sample(s[k % len(s)], k)
    t = _type(s)
    if t == "record":
        return {f["name"]: _sample(f["type"], k) for f in s["fields"]}
    if t == "enum":
        return s["symbols"][k % len(s["symbols"])]
    if t == "array":
        return [_sample(s["items"], k)]
    if t == "map":
        return {"key": _sample(s["values"], k)}
    if t == "fixed":
        return bytes(s["size"])
    values = {
        "null": None,
        "boolean": k % 2 == 0,
        "int": k + 1,
        "long": 1_700_000_000_000_000 + k,
        "float": 0.5 + k,
        "double": 0.25 + k,
        "string": f"s{k}",
        "bytes": bytes([k % 256]),
    }
    return values[t]


def _widest(s: Any) -> int:
    """The most choices (union branches, enum symbols) any one place of the schema offers."""
    if isinstance(s, list):
        return max([len(s), *(_widest(b) for b in s)])
    t = _type(s)
    if t == "record":
        return max([1, *(_widest(f["type"]) for f in s["fields"])])
    if t == "enum":
        return len(s["symbols"])
    if t == "array":
        return _widest(s["items"])
    if t == "map":
        return _widest(s["values"])
    return 1


def _type(s: Any) -> str:
    if isinstance(s, str):
        return s
    t = s["type"]
    return t if isinstance(t, str) else _type(t)


def _logical(s: Any) -> str | None:
    return s.get("logicalType") if isinstance(s, dict) else None


def _same_name(w: Mapping[str, Any], r: Mapping[str, Any]) -> bool:
    aliases = {_short(a) for a in r.get("aliases", ())}
    return _short(w["name"]) in {_short(r["name"]), *aliases}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _describe(s: Any) -> str:
    if isinstance(s, list):
        return "union of " + ", ".join(_describe(b) for b in s)
    t = _type(s)
    name = s.get("name") if isinstance(s, dict) else None
    return f"{t} {_short(name)}" if name else t
