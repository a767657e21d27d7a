"""The camera list: from a YAML/JSON file or from a single --camera-url, and how it changed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from framebus.errors import ConfigError
from framebus_decoder.motion import MotionConfig, Polygon
from framebus_decoder.settings import DecoderSettings, RtspTransport

# Every key of a camera entry; the chart's values.schema.json takes the same (tests/deploy).
CAMERA_KEYS = {
    "id",
    "url",
    "target_fps",
    "sample_phase",
    "rtsp_transport",
    "loop",
    "realtime",
    "options",
    "motion",
    "video",
}
_MOTION_KEYS = {"enabled", "threshold", "min_area", "still_refresh_s", "lighting_fraction", "mask"}


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
    motion: MotionConfig | None = None  # None: no motion gate, every sampled frame in full
    video: bool = False  # publish every compressed packet to the video topic (clips)

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
                motion=_motion(settings.camera_id, None, settings),
                video=settings.video_enabled,
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
    unknown = set(item) - CAMERA_KEYS
    if unknown:
        raise ConfigError(
            f"camera file: entry {n} ({item['id']}) has unknown keys {sorted(unknown)}; "
            f"known: {sorted(CAMERA_KEYS)}"
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
        motion=_motion(str(item["id"]), item.get("motion"), defaults),
        video=_video(item, defaults),
    )


def _video(item: dict[str, Any], defaults: DecoderSettings) -> bool:
    """The camera's `video` flag over FRAMEBUS_VIDEO_ENABLED: whether its packets are published."""
    video = item.get("video", defaults.video_enabled)
    if not isinstance(video, bool):
        raise ConfigError(
            f"camera file: video of {item['id']} must be true or false, got {video!r}"
        )
    return video


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


def _motion(camera_id: str, raw: Any, defaults: DecoderSettings) -> MotionConfig | None:
    """The camera's motion gate: its `motion` mapping over the FRAMEBUS_MOTION_* defaults."""
    where = f"camera file: motion of {camera_id}"
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping, e.g. {{enabled: true, threshold: 25}}")
    unknown = set(raw) - _MOTION_KEYS
    if unknown:
        raise ConfigError(
            f"{where} has unknown keys {sorted(unknown)}; known: {sorted(_MOTION_KEYS)}"
        )
    enabled = raw.get("enabled", defaults.motion_enabled)
    if not isinstance(enabled, bool):
        raise ConfigError(f"{where}: enabled must be true or false, got {enabled!r}")
    if not enabled:
        return None
    config = MotionConfig(
        threshold=_number(raw, "threshold", defaults.motion_threshold, where),
        min_area=_number(raw, "min_area", defaults.motion_min_area, where),
        still_refresh_s=_number(raw, "still_refresh_s", defaults.motion_still_refresh_s, where),
        lighting_fraction=_number(
            raw, "lighting_fraction", defaults.motion_lighting_fraction, where
        ),
        mask=_mask(raw.get("mask"), where),
    )
    _check_motion(config, where)
    return config


def _number(raw: dict[str, Any], key: str, default: float, where: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


def _check_motion(config: MotionConfig, where: str) -> None:
    if not 0 < config.threshold < 255:
        raise ConfigError(f"{where}: threshold must be between 0 and 255 (a luma difference)")
    if not 0 < config.min_area <= 1:
        raise ConfigError(f"{where}: min_area must be in (0, 1] (a fraction of the picture)")
    if config.still_refresh_s <= 0:
        raise ConfigError(f"{where}: still_refresh_s must be > 0 (seconds)")
    if not config.min_area < config.lighting_fraction <= 1:
        raise ConfigError(f"{where}: lighting_fraction must be above min_area and at most 1")


def _mask(raw: Any, where: str) -> tuple[Polygon, ...]:
    """Mask polygons: a list of polygons, each a list of at least 3 [x, y] original pixels."""
    if raw is None:
        return ()
    shape = "a list of polygons, each a list of at least 3 [x, y] points in original pixels"
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: mask must be {shape}")
    polygons = []
    for n, polygon in enumerate(raw):
        if not isinstance(polygon, list) or len(polygon) < 3:
            raise ConfigError(f"{where}: mask polygon {n} must have at least 3 points ({shape})")
        polygons.append(tuple(_point(p, f"{where}: mask polygon {n}") for p in polygon))
    return tuple(polygons)


def _point(raw: Any, where: str) -> tuple[float, float]:
    ok = (
        isinstance(raw, list | tuple)
        and len(raw) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in raw)
    )
    if not ok:
        raise ConfigError(f"{where}: a point must be [x, y], two numbers >= 0, got {raw!r}")
    return (float(raw[0]), float(raw[1]))
