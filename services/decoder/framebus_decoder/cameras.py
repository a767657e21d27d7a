"""The camera list: from a YAML/JSON file or from a single --camera-url, and how it changed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from framebus.errors import ConfigError
from framebus_decoder.settings import DecoderSettings, RtspTransport

_KNOWN_KEYS = {
    "id",
    "url",
    "target_fps",
    "sample_phase",
    "rtsp_transport",
    "loop",
    "realtime",
    "options",
}


@dataclass(frozen=True)
class Camera:
    """One camera: id, URL, target frame rate and its source options."""

    id: str
    url: str
    target_fps: float
    rtsp_transport: RtspTransport = RtspTransport.TCP
    loop: bool = False
    realtime: bool = False
    # Extra FFmpeg options (AVOptions) for this source, e.g. (("analyzeduration", "1000000"),).
    options: tuple[tuple[str, str], ...] = ()
    # Where in each sampling interval frames are taken (0 <= phase < 1); None: the decoder
    # spreads the cameras it starts (see sampler.spread_phase).
    sample_phase: float | None = None

    @property
    def is_file(self) -> bool:
        """True for local files (they end; network sources are reconnected instead)."""
        return "://" not in self.url or self.url.startswith("file://")


@dataclass(frozen=True)
class CameraChanges:
    """The difference between two camera lists, by id."""

    added: tuple[Camera, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[Camera, ...] = ()  # same id, new url or options: restart it

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff_cameras(old: dict[str, Camera], new: list[Camera]) -> CameraChanges:
    """What to start, stop and restart to go from the running cameras to a new list."""
    new_by_id = {c.id: c for c in new}
    return CameraChanges(
        added=tuple(c for c in new if c.id not in old),
        removed=tuple(i for i in old if i not in new_by_id),
        changed=tuple(c for c in new if c.id in old and old[c.id] != c),
    )


def load_cameras(settings: DecoderSettings) -> list[Camera]:
    """Cameras from `cameras_file` if set, else the single `camera_url`."""
    if settings.cameras_file is not None:
        return parse_cameras(read_cameras_file(settings.cameras_file), settings)
    if settings.camera_url:
        return [
            Camera(
                settings.camera_id,
                settings.camera_url,
                settings.target_fps,
                settings.rtsp_transport,
                settings.loop,
                settings.realtime,
            )
        ]
    raise ConfigError(
        "no cameras: set FRAMEBUS_CAMERAS_FILE (--cameras-file) or "
        "FRAMEBUS_CAMERA_URL (--camera-url)"
    )


def read_cameras_file(path: Path) -> Any:
    """The parsed YAML (or JSON, by suffix) document of a cameras file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"FRAMEBUS_CAMERAS_FILE: cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"FRAMEBUS_CAMERAS_FILE: {path} is not valid YAML/JSON: {exc}") from None


def parse_cameras(doc: Any, defaults: DecoderSettings) -> list[Camera]:
    """Validate a parsed camera document: `{cameras: [{id, url, ...}]}` or a bare list."""
    if doc is None:
        return []
    items = doc.get("cameras") if isinstance(doc, dict) else doc
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError("camera file: expected a list under `cameras`")
    cameras = [_camera(n, item, defaults) for n, item in enumerate(items)]
    ids = [c.id for c in cameras]
    if len(set(ids)) != len(ids):
        raise ConfigError("camera file: camera ids must be unique")
    return cameras


def _camera(n: int, item: Any, defaults: DecoderSettings) -> Camera:
    if not isinstance(item, dict) or not item.get("id") or not item.get("url"):
        raise ConfigError(f"camera file: entry {n} needs `id` and `url`")
    unknown = set(item) - _KNOWN_KEYS
    if unknown:
        raise ConfigError(
            f"camera file: entry {n} ({item['id']}) has unknown keys {sorted(unknown)}; "
            f"known: {sorted(_KNOWN_KEYS)}"
        )
    options = item.get("options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"camera file: `options` of {item['id']} must be a mapping")
    try:
        fps = float(item.get("target_fps", defaults.target_fps))
        transport = RtspTransport(str(item.get("rtsp_transport", defaults.rtsp_transport.value)))
    except ValueError as exc:
        raise ConfigError(f"camera file: entry {n} ({item['id']}): {exc}") from None
    if fps < 0:
        raise ConfigError(f"camera file: target_fps of {item['id']} must be >= 0")
    phase = _sample_phase(item)
    return Camera(
        id=str(item["id"]),
        url=str(item["url"]),
        target_fps=fps,
        rtsp_transport=transport,
        loop=bool(item.get("loop", defaults.loop)),
        realtime=bool(item.get("realtime", defaults.realtime)),
        options=tuple(sorted((str(k), str(v)) for k, v in options.items())),
        sample_phase=phase,
    )


def _sample_phase(item: dict[str, Any]) -> float | None:
    raw = item.get("sample_phase")
    if raw is None:
        return None
    try:
        phase = float(raw)
    except (TypeError, ValueError):
        phase = -1.0
    if not 0.0 <= phase < 1.0:
        raise ConfigError(
            f"camera file: sample_phase of {item['id']} must be a number in [0, 1) "
            f"(a fraction of the sampling interval), got {raw!r}"
        )
    return phase
