"""The live state, owned by the event loop: cameras, their displays and figures, alerts, viewers.

Consumer threads never touch it: they hand records to the inbox, and the loop drains the inbox
into the hub. Viewers (pages over /ws) and /mjpeg streams only read it.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from framebus.messages import Alert, Clip, Frame
from framebus_live import protocol
from framebus_live.pacer import TilePacer, tile_interval_s
from framebus_live.records import BoxesRecord
from framebus_live.settings import LiveSettings
from framebus_live.source import SourceChooser
from framebus_live.stats import CameraFigures, CameraStats
from framebus_live.telemetry import LiveMetrics
from framebus_live.views import CameraView, Display


class Viewer(Protocol):
    """What the hub tells a connected page."""

    @property
    def cameras(self) -> set[str]:
        """The cameras whose tiles the page wants."""
        ...

    def offer_tile(self, tile: Any) -> None:
        """A new tile of one of its cameras."""
        ...

    def offer_text(self, text: str) -> None:
        """A message every page gets (an alert, the camera list)."""
        ...

    def offer_stats(self, text: str) -> None:
        """The figures message (latest only)."""
        ...


class LiveHub:
    """Everything the pages show, updated from the inbox on the loop's thread."""

    def __init__(
        self,
        settings: LiveSettings,
        metrics: LiveMetrics,
        make_tile: Callable[[str, Display], Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._make_tile = make_tile
        self._clock = clock
        self.views: dict[str, CameraView] = {}
        self.stats: dict[str, CameraStats] = {}
        self.alerts: deque[Alert] = deque(maxlen=settings.alerts_feed_size)
        # Clip fields by their alert's key; a clip may come before its alert (other consumer).
        self.clips: OrderedDict[protocol.AlertKey, dict[str, Any]] = OrderedDict()
        self.chooser = SourceChooser(settings.live_source)
        self.viewers: set[Viewer] = set()
        self._pacer = TilePacer()
        # camera -> (display version, tile): the tile pages get until the display changes.
        self._tiles: dict[str, tuple[int, Any]] = {}
        # One event per camera some /mjpeg stream waits on; set and dropped at its next change.
        self._changed: dict[str, asyncio.Event] = {}

    # -- input, from the inbox -------------------------------------------------------------
    def take(self, frames: Iterable[tuple[Frame, int]], items: Iterable[Any]) -> None:
        """Apply what the consumers handed over since the last drain."""
        for frame, arrivals in frames:
            self.on_frame(frame, arrivals)
        for item in items:
            if isinstance(item, BoxesRecord):
                self.on_boxes(item)
            elif isinstance(item, Alert):
                self.on_alert(item)
            elif isinstance(item, Clip):
                self.on_clip(item)

    def on_frame(self, frame: Frame, arrivals: int = 1) -> None:
        """A camera's newest frame, the last of `arrivals` frames that came since the last one."""
        now = self._clock()
        view = self._camera(frame.camera_id)
        self.stats[frame.camera_id].frame_in(now, arrivals)
        self.metrics.frames_received.labels(frame.camera_id).inc(arrivals)
        unpaired, unshown = view.unpaired, view.unshown_still
        if view.add_frame(frame, now):
            self._display_changed(frame.camera_id)
        self.metrics.frames_unpaired.inc(view.unpaired - unpaired)
        self.metrics.frames_still_unshown.inc(view.unshown_still - unshown)

    def on_boxes(self, record: BoxesRecord) -> None:
        """A detections or tracks record; shown only if it is the camera's source."""
        now = self._clock()
        used = self.chooser.use(record.camera_id, record.source, now)
        self.metrics.records_received.labels(record.source, str(used).lower()).inc()
        if not used:
            return
        view = self._camera(record.camera_id)
        stats = self.stats[record.camera_id]
        stats.source = record.source
        stats.record_out(
            now, record.seq, record.capture_ts_us, record.status, record.e2e_latency_ms
        )
        if view.add_boxes(record):
            self._display_changed(record.camera_id)

    def on_alert(self, alert: Alert) -> None:
        """An alert: into the feed and to every page."""
        self.alerts.append(alert)
        self.metrics.alerts_received.inc()
        text = protocol.alert_message(alert, self.clips.get(protocol.alert_key(alert)))
        for viewer in self.viewers:
            viewer.offer_text(text)

    def on_clip(self, clip: Clip) -> None:
        """An alert's clip record: kept for the feed, and to every page (links, or why none)."""
        fields = protocol.clip_fields(clip, self.settings.clips_dir)
        key = protocol.clip_key(clip)
        self.clips[key] = fields
        self.clips.move_to_end(key)
        while len(self.clips) > 2 * self.settings.alerts_feed_size:  # the feed's and a margin
            self.clips.popitem(last=False)
        self.metrics.clips_received.labels(clip.status.value).inc()
        text = protocol.clip_message(clip, fields)
        for viewer in self.viewers:
            viewer.offer_text(text)

    def _camera(self, camera: str) -> CameraView:
        view = self.views.get(camera)
        if view is None:
            view = self.views[camera] = CameraView(self.settings.pair_wait_ms / 1000)
            self.stats[camera] = CameraStats(self.settings.stats_window_s)
            self.metrics.cameras.set(len(self.views))
            text = protocol.cameras_message(self.cameras())
            for viewer in self.viewers:
                viewer.offer_text(text)
        return view

    def _display_changed(self, camera: str) -> None:
        event = self._changed.pop(camera, None)
        if event is not None:
            event.set()

    # -- output ----------------------------------------------------------------------------
    def cameras(self) -> list[str]:
        """Every camera seen, sorted."""
        return sorted(self.views)

    def wanted(self) -> set[str]:
        """The cameras some page shows."""
        return set().union(*(v.cameras for v in self.viewers)) if self.viewers else set()

    def tick(self) -> None:
        """Show frames whose boxes are late, and send the tiles that are due (every ~20 ms)."""
        now = self._clock()
        for camera, view in self.views.items():
            if view.expire(now):
                self._display_changed(camera)
        wanted = self.wanted()
        interval = tile_interval_s(
            self.settings.tile_fps, self.settings.max_tiles_per_s, len(wanted)
        )
        self.metrics.tile_interval_seconds.set(interval)
        for camera in self._pacer.cameras() - wanted:
            self._pacer.forget(camera)
        for camera in self._tiles.keys() - wanted:
            del self._tiles[camera]  # it would only go stale (and hold its frame) unseen
        for camera in sorted(wanted & self.views.keys()):
            display = self.views[camera].display
            if display is None or self._current_tile(camera) is not None:
                continue
            if not self._pacer.due(camera, now, interval):
                continue
            tile = self._make_tile(camera, display)
            self._tiles[camera] = (display.version, tile)
            for viewer in self.viewers:
                if camera in viewer.cameras:
                    viewer.offer_tile(tile)

    def _current_tile(self, camera: str) -> Any | None:
        """The tile made of the camera's display as it is now, if one was made."""
        view = self.views.get(camera)
        cached = self._tiles.get(camera)
        if view is None or view.display is None or cached is None:
            return None
        version, tile = cached
        return tile if version == view.display.version else None

    def figures(self) -> dict[str, CameraFigures]:
        """Every camera's figures now."""
        now = self._clock()
        return {
            c: self.stats[c].figures(now, self.settings.stalled_after_s) for c in self.cameras()
        }

    def send_stats(self) -> None:
        """The figures to every page (once a second)."""
        if not self.viewers:
            return
        text = protocol.stats_message(self.figures())
        for viewer in self.viewers:
            viewer.offer_stats(text)

    def hello(self) -> str:
        """What a new page gets first."""
        alerts = [(a, self.clips.get(protocol.alert_key(a))) for a in self.alerts]
        return protocol.hello(
            self.settings.page_size, self.settings.tile_fps, self.cameras(), alerts
        )

    def add_viewer(self, viewer: Viewer) -> None:
        """A page connected."""
        self.viewers.add(viewer)
        self.metrics.viewers.set(len(self.viewers))
        self.metrics.viewer_connections.inc()

    def remove_viewer(self, viewer: Viewer) -> None:
        """A page went away."""
        self.viewers.discard(viewer)
        self.metrics.viewers.set(len(self.viewers))

    def subscribed(self, viewer: Viewer, cameras: Iterable[str]) -> None:
        """`viewer` now also shows `cameras`: their tiles already made go to it alone.

        A camera whose display changed since its last tile gets a new one at a tick, for every
        page that shows it.
        """
        for camera in cameras:
            tile = self._current_tile(camera)
            if tile is not None:
                viewer.offer_tile(tile)

    def changed(self, camera: str) -> asyncio.Event:
        """An event set at `camera`'s next display change (for /mjpeg streams); ask again after."""
        return self._changed.setdefault(camera, asyncio.Event())
