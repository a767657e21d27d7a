"""The camera list: from a YAML/JSON file or from a single --camera-url."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from framebus.errors import ConfigError
from framebus_decoder.settings import DecoderSettings


@dataclass(frozen=True)
class Camera:
    """One camera: id, URL, target frame rate."""

    id: str
    url: str
    target_fps: float


def load_cameras(settings: DecoderSettings) -> list[Camera]:
    """Cameras from `cameras_file` if set, else the single `camera_url`."""
    if settings.cameras_file is not None:
        return parse_cameras(_read(settings.cameras_file), settings.target_fps)
    if settings.camera_url:
        return [Camera(settings.camera_id, settings.camera_url, settings.target_fps)]
    raise ConfigError(
        "no cameras: set FRAMEBUS_CAMERAS_FILE (--cameras-file) or "
        "FRAMEBUS_CAMERA_URL (--camera-url)"
    )


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"FRAMEBUS_CAMERAS_FILE: cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"FRAMEBUS_CAMERAS_FILE: {path} is not valid YAML/JSON: {exc}") from None


def parse_cameras(doc: Any, default_fps: float) -> list[Camera]:
    """Validate a parsed camera document: `{cameras: [{id, url, target_fps?}]}` or a bare list."""
    items = doc.get("cameras") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise ConfigError("camera file: expected a list under `cameras`")
    cameras: list[Camera] = []
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not item.get("id") or not item.get("url"):
            raise ConfigError(f"camera file: entry {n} needs `id` and `url`")
        fps = float(item.get("target_fps", default_fps))
        cameras.append(Camera(str(item["id"]), str(item["url"]), fps))
    ids = [c.id for c in cameras]
    if len(set(ids)) != len(ids):
        raise ConfigError("camera file: camera ids must be unique")
    return cameras
