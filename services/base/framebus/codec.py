"""Avro single-object encoding of framebus records (marker C3 01, CRC-64-AVRO fingerprint, body).

Writers always use the schemas in `schemas/`. A reader finds the writer's schema by the fingerprint
in the message header among the schemas it knows (the current one and every released version, kept
in `schemas/released-versions/<name>/v<N>.avsc`) and resolves it to its own, newer, reader schema,
so adding a field with a default never breaks a consumer. Readers are upgraded before writers: a reader cannot
resolve a fingerprint it has never seen (docs/architecture.md, "Schema evolution").
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from framebus.avro_mapping import RecordMapping
from framebus.errors import CodecError, UnknownSchemaError
from framebus.messages import Alert, Clip, Detections, Frame, FrameStatus, Tracks, VideoPacket

MAGIC = b"\xc3\x01"
HEADER_BYTES = 10
SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"
# <name>/v<N>.avsc: every released version, kept forever. The hyphen keeps setuptools from taking
# the folders for Python packages.
RELEASED_DIR = "released-versions"
_VERSION_FILE = re.compile(r"v([1-9][0-9]*)\.avsc")
T = TypeVar("T")


def schema_fingerprint(schema: Mapping[str, Any] | str) -> bytes:
    """CRC-64-AVRO (Rabin) fingerprint of a schema's canonical form, little-endian, 8 bytes."""
    parsed = fastavro.parse_schema(schema if isinstance(schema, str) else dict(schema))
    canonical = to_parsing_canonical_form(parsed)
    # fastavro already returns the little-endian byte order that single-object encoding uses.
    return bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))


def parse_plain(schema: Mapping[str, Any]) -> Any:
    """Fastavro's parsed `schema` without its logical types, for reading and writing records.

    framebus holds times as integer microseconds, so nothing needs converting, and fastavro's
    conversion of each timestamp to and from `datetime` costs more than coding the field. The
    bytes are the same and so is the fingerprint: logical types are not part of the parsing
    canonical form.
    """
    return fastavro.parse_schema(_without_logical_types(dict(schema)))


def _without_logical_types(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_logical_types(v) for k, v in node.items() if k != "logicalType"}
    if isinstance(node, list):
        return [_without_logical_types(v) for v in node]
    return node


def load_schema(name: str, schemas_dir: Path = SCHEMAS_DIR) -> dict[str, Any]:
    """Read `schemas/<name>.avsc`, the schema this release writes, as JSON."""
    return _read_schema(schemas_dir / f"{name}.avsc")


@dataclass(frozen=True)
class SchemaVersion:
    """One released version of a schema: `schemas/released-versions/<name>/v<version>.avsc`."""

    name: str
    version: int
    path: Path
    schema: Mapping[str, Any]


def released_versions(name: str, schemas_dir: Path = SCHEMAS_DIR) -> list[SchemaVersion]:
    """Every released version of `schemas/<name>.avsc`, oldest first; empty when none is kept."""
    folder = schemas_dir / RELEASED_DIR / name
    versions = []
    for path in sorted(folder.glob("*.avsc")):
        match = _VERSION_FILE.fullmatch(path.name)
        if match is None:
            raise CodecError(f"{path}: a schema version file is named v<N>.avsc (v1.avsc, v2.avsc)")
        versions.append(SchemaVersion(name, int(match[1]), path, _read_schema(path)))
    return sorted(versions, key=lambda v: v.version)


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CodecError(f"cannot load Avro schema {path}: {exc}") from exc
    return loaded


def _released_schemas(name: str, schemas_dir: Path) -> list[Mapping[str, Any]]:
    return [v.schema for v in released_versions(name, schemas_dir)]


class SingleObjectCodec:
    """Encode with one writer schema; decode any known writer schema into the reader schema.

    `older_schemas` are the other writer schemas this reader resolves by fingerprint: the released
    versions of `schema` (see `released_versions`), or any other version it is handed.
    """

    def __init__(
        self, schema: Mapping[str, Any], older_schemas: Iterable[Mapping[str, Any]] = ()
    ) -> None:
        self._schema = parse_plain(schema)
        self._fingerprint = schema_fingerprint(schema)
        self._writers: dict[bytes, Any] = {self._fingerprint: self._schema}
        for old in older_schemas:
            # A released copy of the current schema has its fingerprint (docs and defaults are not
            # part of it): keep the current one.
            fp = schema_fingerprint(old)
            if fp not in self._writers:
                self._writers[fp] = parse_plain(old)
        self.name = str(schema.get("name"))

    @property
    def fingerprint(self) -> bytes:
        """Fingerprint of the writer schema this codec encodes with."""
        return self._fingerprint

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Serialize a record dict to single-object-encoded bytes."""
        out = io.BytesIO()
        out.write(MAGIC)
        out.write(self._fingerprint)
        try:
            fastavro.schemaless_writer(out, self._schema, dict(record))
        except (ValueError, TypeError, KeyError) as exc:
            raise CodecError(f"cannot encode {self.name}: {exc}") from exc
        return out.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        """Parse single-object-encoded bytes; raise CodecError with a reason when impossible."""
        if len(data) < HEADER_BYTES or data[:2] != MAGIC:
            raise CodecError(
                f"not an Avro single-object-encoded {self.name}: "
                f"missing the C3 01 marker (first bytes {data[:4].hex() or 'none'})"
            )
        writer = self._writers.get(data[2:HEADER_BYTES])
        if writer is None:
            raise UnknownSchemaError(
                f"unknown schema fingerprint {data[2:HEADER_BYTES].hex()} for {self.name}; "
                f"known: {', '.join(fp.hex() for fp in self._writers)}. A newer writer's "
                "record (readers are upgraded before writers), or not a framebus record."
            )
        try:
            record: dict[str, Any] = fastavro.schemaless_reader(  # type: ignore[assignment]
                io.BytesIO(data[HEADER_BYTES:]), writer, self._schema
            )
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise CodecError(f"corrupt {self.name} body: {type(exc).__name__}: {exc}") from exc
        return record


class RecordCodec(Generic[T]):
    """A message type <-> bytes, by `schemas/<name>.avsc` (fields mapped by `RecordMapping`)."""

    def __init__(self, cls: type[T], name: str, schemas_dir: Path) -> None:
        self._schema = load_schema(name, schemas_dir)
        self._codec = SingleObjectCodec(self._schema, _released_schemas(name, schemas_dir))
        self._mapping = RecordMapping(cls, self._mapped_schema(self._schema))

    def _mapped_schema(self, schema: dict[str, Any]) -> Mapping[str, Any]:
        """The schema the message type is mapped against: the wire's, unless a subclass says."""
        return schema

    def encode(self, value: T) -> bytes:
        """Serialize a record."""
        return self._codec.encode(self._mapping.to_avro(value))

    def decode(self, data: bytes) -> T:
        """Parse a record; raise CodecError with a reason when impossible."""
        return self._mapping.from_avro(self._codec.decode(data))


_HEAD_PREFIX_BYTES = 4096  # a frame's small fields; a longer head takes the full decode


class FrameCodec(RecordCodec[Frame]):
    """Frame <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        super().__init__(Frame, "frame", schemas_dir)
        fields = self._schema["fields"]
        if fields[-1]["name"] != "tensor":
            raise CodecError("frame.avsc: `tensor` must stay the last field (decode_view)")
        # The small fields, then the tensor's length prefix (Avro bytes = a long, then the bytes).
        head_fields = [*fields[:-1], {"name": "tensor_size", "type": "long"}]
        self._head = parse_plain({**self._schema, "name": "FrameHead", "fields": head_fields})

    def decode_view(self, data: bytes) -> Frame:
        """Parse a frame whose `tensor` is a memoryview into `data`: the tensor is not copied.

        `tensor` is the last field of the frame schema, so a record written with the current
        schema is its small fields, the tensor's length (a zigzag varint) and the tensor bytes:
        only the head is parsed (from a small prefix) and the rest is a view. Records of an older
        writer schema, or any the fast path cannot vouch for, take the full `decode`.
        """
        if data[2:HEADER_BYTES] != self._codec.fingerprint or data[:2] != MAGIC:
            return self.decode(data)
        head_bytes = data[HEADER_BYTES : HEADER_BYTES + _HEAD_PREFIX_BYTES]
        stream = io.BytesIO(head_bytes)
        try:
            r: dict[str, Any] = fastavro.schemaless_reader(  # type: ignore[assignment]
                stream, self._head, self._head
            )
        except (EOFError, ValueError, TypeError, IndexError, UnicodeDecodeError):
            return self.decode(data)  # a head longer than the prefix, or corrupt: full path
        size, start = r["tensor_size"], HEADER_BYTES + stream.tell()
        if size < 0 or start + size != len(data):
            raise CodecError(
                f"corrupt {self._codec.name} body: tensor of {size} B declared, "
                f"{len(data) - start} B follow the head"
            )
        r["tensor"] = memoryview(data)[start:]
        return self._mapping.from_avro(r)


STILL_REASON = "still"


class _StillStatusCodec(RecordCodec[T]):
    """A record whose `status` may be STILL: on the wire DROPPED_STALE with `still` set.

    The status enum has no default, so a symbol added to it would stop readers from before it;
    a new field with a default does not, and those readers take a still frame for one the model
    did not look at, which it is.
    """

    def _mapped_schema(self, schema: dict[str, Any]) -> Mapping[str, Any]:
        return _with_still_symbol(schema)

    def encode(self, value: T) -> bytes:
        record = self._mapping.to_avro(value)
        if record["status"] == FrameStatus.STILL.name:
            record = {**record, "status": FrameStatus.DROPPED_STALE.name, "still": True}
            record["reason"] = record.get("reason") or STILL_REASON
        return self._codec.encode(record)

    def decode(self, data: bytes) -> T:
        record = self._codec.decode(data)
        if record.pop("still", False):
            record["status"] = FrameStatus.STILL.name
        return self._mapping.from_avro(record)


def _with_still_symbol(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with STILL among its status enum's symbols: the shape framebus's values take."""

    def widened(field: dict[str, Any]) -> dict[str, Any]:
        kind = field["type"]
        return {**field, "type": {**kind, "symbols": [*kind["symbols"], FrameStatus.STILL.name]}}

    fields = [widened(f) if f["name"] == "status" else f for f in schema["fields"]]
    return {**schema, "fields": fields}


class DetectionsCodec(_StillStatusCodec[Detections]):
    """Detections <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        super().__init__(Detections, "detections", schemas_dir)


class TracksCodec(_StillStatusCodec[Tracks]):
    """Tracks <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        super().__init__(Tracks, "tracks", schemas_dir)


class AlertCodec(RecordCodec[Alert]):
    """Alert <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        super().__init__(Alert, "alert", schemas_dir)


class VideoPacketCodec(RecordCodec[VideoPacket]):
    """VideoPacket <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        super().__init__(VideoPacket, "video", schemas_dir)


class ClipCodec(RecordCodec[Clip]):
    """Clip <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        super().__init__(Clip, "clip", schemas_dir)
