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
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from framebus.errors import CodecError, UnknownSchemaError
from framebus.messages import (
    Alert,
    Box,
    Compression,
    CrossingDirection,
    Detections,
    Frame,
    FrameStatus,
    RuleType,
    TensorLayout,
    TrackedObject,
    Tracks,
    ZoneAnchor,
)

MAGIC = b"\xc3\x01"
HEADER_BYTES = 10
SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"
# <name>/v<N>.avsc: every released version, kept forever. The hyphen keeps setuptools from taking
# the folders for Python packages.
RELEASED_DIR = "released-versions"
_VERSION_FILE = re.compile(r"v([1-9][0-9]*)\.avsc")


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


_HEAD_PREFIX_BYTES = 4096  # a frame's small fields; a longer head takes the full decode


class FrameCodec:
    """Frame <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        schema = load_schema("frame", schemas_dir)
        self._codec = SingleObjectCodec(schema, _released_schemas("frame", schemas_dir))
        fields = schema["fields"]
        if fields[-1]["name"] != "tensor":
            raise CodecError("frame.avsc: `tensor` must stay the last field (decode_view)")
        # The small fields, then the tensor's length prefix (Avro bytes = a long, then the bytes).
        head_fields = [*fields[:-1], {"name": "tensor_size", "type": "long"}]
        self._head = parse_plain({**schema, "name": "FrameHead", "fields": head_fields})

    def encode(self, frame: Frame) -> bytes:
        """Serialize a frame."""
        return self._codec.encode(
            {
                "camera_id": frame.camera_id,
                "seq": frame.seq,
                "capture_ts_us": frame.capture_ts_us,
                "pts_s": frame.pts_s,
                "orig_width": frame.orig_width,
                "orig_height": frame.orig_height,
                "shape": list(frame.shape),
                "dtype": frame.dtype,
                "layout": frame.layout.value,
                "scale": frame.scale,
                "pad_x": frame.pad_x,
                "pad_y": frame.pad_y,
                "compression": frame.compression.name,
                "tensor": frame.tensor,
            }
        )

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
        return self._frame(r, memoryview(data)[start:])

    def decode(self, data: bytes) -> Frame:
        """Parse a frame."""
        r = self._codec.decode(data)
        return self._frame(r, r["tensor"])

    @staticmethod
    def _frame(r: Mapping[str, Any], tensor: bytes | memoryview) -> Frame:
        return Frame(
            camera_id=r["camera_id"],
            seq=r["seq"],
            capture_ts_us=r["capture_ts_us"],
            pts_s=r["pts_s"],
            orig_width=r["orig_width"],
            orig_height=r["orig_height"],
            shape=tuple(r["shape"]),
            dtype=r["dtype"],
            layout=TensorLayout(r["layout"]),
            scale=r["scale"],
            pad_x=r["pad_x"],
            pad_y=r["pad_y"],
            compression=Compression[r["compression"]],
            tensor=tensor,
        )


class DetectionsCodec:
    """Detections <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        self._codec = SingleObjectCodec(
            load_schema("detections", schemas_dir), _released_schemas("detections", schemas_dir)
        )

    def encode(self, det: Detections) -> bytes:
        """Serialize a detections record."""
        return self._codec.encode(
            {
                "camera_id": det.camera_id,
                "seq": det.seq,
                "capture_ts_us": det.capture_ts_us,
                "status": det.status.value,
                "reason": det.reason,
                "model_name": det.model_name,
                "model_version": det.model_version,
                "orig_width": det.orig_width,
                "orig_height": det.orig_height,
                "boxes": [b.__dict__ for b in det.boxes],
                "queue_wait_ms": det.queue_wait_ms,
                "inference_ms": det.inference_ms,
                "batch_size": det.batch_size,
                "e2e_latency_ms": det.e2e_latency_ms,
                "frame_partition": det.frame_partition,
                "frame_offset": det.frame_offset,
            }
        )

    def decode(self, data: bytes) -> Detections:
        """Parse a detections record."""
        r = self._codec.decode(data)
        return Detections(
            camera_id=r["camera_id"],
            seq=r["seq"],
            capture_ts_us=r["capture_ts_us"],
            status=FrameStatus(r["status"]),
            reason=r["reason"],
            model_name=r["model_name"],
            model_version=r["model_version"],
            orig_width=r["orig_width"],
            orig_height=r["orig_height"],
            boxes=tuple(Box(**b) for b in r["boxes"]),
            queue_wait_ms=r["queue_wait_ms"],
            inference_ms=r["inference_ms"],
            batch_size=r["batch_size"],
            e2e_latency_ms=r["e2e_latency_ms"],
            frame_partition=r["frame_partition"],
            frame_offset=r["frame_offset"],
        )


class AlertCodec:
    """Alert <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        self._codec = SingleObjectCodec(
            load_schema("alert", schemas_dir), _released_schemas("alert", schemas_dir)
        )

    def encode(self, alert: Alert) -> bytes:
        """Serialize an alert record."""
        return self._codec.encode(
            {
                "rule": alert.rule,
                "camera_id": alert.camera_id,
                "seq": alert.seq,
                "capture_ts_us": alert.capture_ts_us,
                "fired_at_us": alert.fired_at_us,
                "consecutive_frames": alert.consecutive_frames,
                "zone": [{"x": x, "y": y} for x, y in alert.zone],
                "anchor": alert.anchor.value,
                "boxes": [b.__dict__ for b in alert.boxes],
                "model_name": alert.model_name,
                "model_version": alert.model_version,
                "detections_partition": alert.detections_partition,
                "detections_offset": alert.detections_offset,
                "rule_type": alert.rule_type.value,
                "track_id": alert.track_id,
                "direction": alert.direction.value,
                "measure": alert.measure,
                "counts": dict(alert.counts),
            }
        )

    def decode(self, data: bytes) -> Alert:
        """Parse an alert record."""
        r = self._codec.decode(data)
        return Alert(
            rule=r["rule"],
            camera_id=r["camera_id"],
            seq=r["seq"],
            capture_ts_us=r["capture_ts_us"],
            fired_at_us=r["fired_at_us"],
            consecutive_frames=r["consecutive_frames"],
            zone=tuple((p["x"], p["y"]) for p in r["zone"]),
            anchor=ZoneAnchor(r["anchor"]),
            boxes=tuple(Box(**b) for b in r["boxes"]),
            model_name=r["model_name"],
            model_version=r["model_version"],
            detections_partition=r["detections_partition"],
            detections_offset=r["detections_offset"],
            rule_type=RuleType(r["rule_type"]),
            track_id=r["track_id"],
            direction=CrossingDirection(r["direction"]),
            measure=r["measure"],
            counts=tuple(sorted(r["counts"].items())),
        )


class TracksCodec:
    """Tracks <-> bytes."""

    def __init__(self, schemas_dir: Path = SCHEMAS_DIR) -> None:
        self._codec = SingleObjectCodec(
            load_schema("tracks", schemas_dir), _released_schemas("tracks", schemas_dir)
        )

    def encode(self, tracks: Tracks) -> bytes:
        """Serialize a tracks record."""
        return self._codec.encode(
            {
                "camera_id": tracks.camera_id,
                "seq": tracks.seq,
                "capture_ts_us": tracks.capture_ts_us,
                "status": tracks.status.value,
                "reason": tracks.reason,
                "missing_before": tracks.missing_before,
                "model_name": tracks.model_name,
                "model_version": tracks.model_version,
                "orig_width": tracks.orig_width,
                "orig_height": tracks.orig_height,
                "objects": [
                    {
                        "track_id": o.track_id,
                        **o.box.__dict__,
                        "first_seen_us": o.first_seen_us,
                        "confirmed": o.confirmed,
                        "hits": o.hits,
                    }
                    for o in tracks.objects
                ],
                "e2e_latency_ms": tracks.e2e_latency_ms,
                "tracked_at_us": tracks.tracked_at_us,
                "detections_partition": tracks.detections_partition,
                "detections_offset": tracks.detections_offset,
            }
        )

    def decode(self, data: bytes) -> Tracks:
        """Parse a tracks record."""
        r = self._codec.decode(data)
        return Tracks(
            camera_id=r["camera_id"],
            seq=r["seq"],
            capture_ts_us=r["capture_ts_us"],
            status=FrameStatus(r["status"]),
            reason=r["reason"],
            missing_before=r["missing_before"],
            model_name=r["model_name"],
            model_version=r["model_version"],
            orig_width=r["orig_width"],
            orig_height=r["orig_height"],
            objects=tuple(
                TrackedObject(
                    track_id=o["track_id"],
                    box=Box(
                        o["x1"],
                        o["y1"],
                        o["x2"],
                        o["y2"],
                        o["class_id"],
                        o["class_name"],
                        o["score"],
                    ),
                    first_seen_us=o["first_seen_us"],
                    confirmed=o["confirmed"],
                    hits=o["hits"],
                )
                for o in r["objects"]
            ),
            e2e_latency_ms=r["e2e_latency_ms"],
            tracked_at_us=r["tracked_at_us"],
            detections_partition=r["detections_partition"],
            detections_offset=r["detections_offset"],
        )
