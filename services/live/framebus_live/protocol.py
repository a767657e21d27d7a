"""The page's WebSocket protocol (docs/live.md): JSON text messages and binary tile messages. Pure.

Server to page, text: `hello`, `cameras`, `boxes`, `stats`, `alert`, `clip`. Server to page, binary: one
tile = 4-byte big-endian length of a JSON header, the header (`camera`, `seq`, `width`, `height`),
then the JPEG. A tile always follows the `boxes` message of the same camera and seq. Page to
server, text: `{"type": "subscribe", "cameras": [...]}`: the cameras whose tiles it wants.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from framebus.messages import Alert, Clip, short_track_label
from framebus_live.clipfiles import link
from framebus_live.records import BoxesRecord, LiveBox
from framebus_live.stats import CameraFigures
from framebus_live.tiles import PALETTE

VERSION = 1
_HEADER_LEN = struct.Struct(">I")


def dumps(message: Mapping[str, Any]) -> str:
    """One text message."""
    return json.dumps(message, separators=(",", ":"))


# What an alert and its clip record share (docs/clips.md): how a clip finds its alert.
AlertKey = tuple[str, str, int, int]


def alert_key(alert: Alert) -> AlertKey:
    """(camera, rule, seq, capture time) of an alert."""
    return (alert.camera_id, alert.rule, alert.seq, alert.capture_ts_us)


def clip_key(clip: Clip) -> AlertKey:
    """(camera, rule, seq, capture time) of the alert a clip record is of."""
    return (clip.camera_id, clip.rule, clip.seq, clip.capture_ts_us)


def hello(
    page_size: int,
    tile_fps: float,
    cameras: list[str],
    alerts: Iterable[tuple[Alert, dict[str, Any] | None]],
) -> str:
    """The first message on a new socket: limits, palette, cameras and the alerts feed so far.

    `alerts`: each with its clip's fields (`clip_fields`), None while it has no clip record.
    """
    return dumps(
        {
            "type": "hello",
            "version": VERSION,
            "page_size": page_size,
            "tile_fps": tile_fps,
            "palette": ["#{:02x}{:02x}{:02x}".format(*c) for c in PALETTE],
            "cameras": cameras,
            "alerts": [alert_fields(a, clip) for a, clip in alerts],
        }
    )


def cameras_message(cameras: list[str]) -> str:
    """The cameras seen so far, sorted; sent when one is added."""
    return dumps({"type": "cameras", "cameras": cameras})


def boxes_message(record: BoxesRecord | None, camera: str, seq: int) -> str:
    """The boxes of the tile that follows (none when the frame is shown without its record)."""
    body: dict[str, Any] = {"type": "boxes", "camera": camera, "seq": seq, "boxes": []}
    if record is not None:
        body.update(
            status=record.status.value,
            source=record.source,
            orig_width=record.orig_width,
            orig_height=record.orig_height,
            e2e_latency_ms=round(record.e2e_latency_ms, 1),
            boxes=[_box_fields(b) for b in record.boxes],
        )
    return dumps(body)


def _box_fields(live_box: LiveBox) -> dict[str, Any]:
    b = live_box.box
    return {
        "x1": round(b.x1, 1),
        "y1": round(b.y1, 1),
        "x2": round(b.x2, 1),
        "y2": round(b.y2, 1),
        "class_id": b.class_id,
        "class_name": b.class_name,
        "score": round(b.score, 3),
        "track": live_box.track,
        "confirmed": live_box.confirmed,
        "carried": live_box.carried,
    }


def tile_message(camera: str, seq: int, width: int, height: int, jpeg: bytes) -> bytes:
    """One binary tile message."""
    header = json.dumps(
        {"camera": camera, "seq": seq, "width": width, "height": height}, separators=(",", ":")
    ).encode()
    return _HEADER_LEN.pack(len(header)) + header + jpeg


def parse_tile(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(header, JPEG) of a binary tile message (for tests and other clients)."""
    (length,) = _HEADER_LEN.unpack_from(data)
    header = json.loads(data[4 : 4 + length])
    return header, data[4 + length :]


def stats_message(figures: Mapping[str, CameraFigures]) -> str:
    """Every camera's figures over the window, once a second."""
    return dumps({"type": "stats", "cameras": {c: asdict(f) for c, f in figures.items()}})


def alert_fields(alert: Alert, clip: dict[str, Any] | None = None) -> dict[str, Any]:
    """An alert as the feed shows it, with its clip's fields once its clip record came."""
    return {
        "camera": alert.camera_id,
        "rule": alert.rule,
        "rule_type": alert.rule_type.value,
        "track": short_track_label(alert.track_id),
        "direction": alert.direction.value,
        "measure": round(alert.measure, 2),
        "seq": alert.seq,
        "capture_ts_us": alert.capture_ts_us,
        "fired_at_us": alert.fired_at_us,
        "classes": sorted({b.class_name for b in alert.boxes}),
        "clip": clip,
    }


def alert_message(alert: Alert, clip: dict[str, Any] | None = None) -> str:
    """One alert, as it arrives."""
    return dumps({"type": "alert", "alert": alert_fields(alert, clip)})


def clip_fields(clip: Clip, clips_dir: Path) -> dict[str, Any]:
    """A clip record as the feed shows it: status, reason, and how to reach each file."""
    return {
        "status": clip.status.value,
        "reason": clip.reason,
        "video": link(clip.uri, clips_dir),
        "snapshot": link(clip.snapshot_uri, clips_dir),
    }


def clip_message(clip: Clip, fields: dict[str, Any]) -> str:
    """A clip record, as it arrives: the page puts it beside its alert (same camera, rule, seq)."""
    camera, rule, seq, capture_ts_us = clip_key(clip)
    target = {"camera": camera, "rule": rule, "seq": seq, "capture_ts_us": capture_ts_us}
    return dumps({"type": "clip", "alert": target, "clip": fields})


def parse_subscribe(text: str, page_size: int) -> list[str] | None:
    """The cameras of a page's subscribe message (at most `page_size`); None if it is not one."""
    try:
        message = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(message, dict) or message.get("type") != "subscribe":
        return None
    cameras = message.get("cameras")
    if not isinstance(cameras, list):
        return None
    return [str(c) for c in cameras[:page_size]]
