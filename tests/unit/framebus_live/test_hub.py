from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from framebus.messages import Alert, Box, Clip, ClipStatus, FrameStatus, ZoneAnchor
from framebus_live.hub import LiveHub
from framebus_live.records import BoxesRecord, LiveBox
from framebus_live.settings import LiveSettings
from framebus_live.telemetry import LiveMetrics
from framebus_live.views import Display
from tests.unit.framebus_live.test_geometry import _frame

BASE = _frame(1280, 720, 64)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class PageStub:
    def __init__(self, cameras: set[str]) -> None:
        self.cameras = cameras
        self.tiles: list[tuple[str, Display]] = []
        self.texts: list[dict[str, Any]] = []
        self.stats: list[dict[str, Any]] = []

    def offer_tile(self, tile: tuple[str, Display]) -> None:
        self.tiles.append(tile)

    def offer_text(self, text: str) -> None:
        self.texts.append(json.loads(text))

    def offer_stats(self, text: str) -> None:
        self.stats.append(json.loads(text))


def _hub(clock: Clock, **settings: Any) -> LiveHub:
    return LiveHub(
        LiveSettings(**settings), LiveMetrics(), lambda camera, display: (camera, display), clock
    )


def _feed(hub: LiveHub, camera: str, seq: int) -> None:
    frame = replace(BASE, camera_id=camera, seq=seq, capture_ts_us=1000 + seq)
    hub.take([(frame, 1)], [])
    box = LiveBox(Box(1, 2, 3, 4, 0, "person", 0.9))
    record = BoxesRecord(
        camera, seq, 1000 + seq, FrameStatus.INFERRED, 1280, 720, 30.0, (box,), "detections"
    )
    hub.take([], [record])


def test_hub_when_frames_paired_then_only_subscribed_cameras_get_tiles_at_tile_fps() -> None:
    clock = Clock()
    hub = _hub(clock, tile_fps=5.0)
    page = PageStub({"cam-a"})
    hub.add_viewer(page)
    for i in range(10):  # 10 frames a second for one second, both cameras
        clock.now = i * 0.1
        _feed(hub, "cam-a", i)
        _feed(hub, "cam-b", i)
        hub.tick()
    assert {camera for camera, _ in page.tiles} == {"cam-a"}
    assert len(page.tiles) == 5  # tile_fps, not the frame rate
    assert all(d.boxes is not None and d.boxes.seq == d.frame.seq for _, d in page.tiles)
    assert page.texts[0] == {"type": "cameras", "cameras": ["cam-a"]}


def test_hub_when_many_cameras_shown_then_tiles_per_camera_lowered_to_budget() -> None:
    clock = Clock()
    hub = _hub(clock, tile_fps=5.0, max_tiles_per_s=20.0)
    cameras = {f"cam-{i}" for i in range(8)}
    page = PageStub(cameras)
    hub.add_viewer(page)
    for step in range(50):  # 10 frames a second for 5 s, 8 cameras
        clock.now = step * 0.1
        for camera in sorted(cameras):
            _feed(hub, camera, step)
        hub.tick()
    per_camera = len(page.tiles) / len(cameras) / 5.0
    assert 2.0 <= per_camera <= 3.0  # 20 tiles/s over 8 cameras = 2.5 each, not 5


def test_hub_when_alert_then_fed_to_pages_and_kept_for_new_ones() -> None:
    hub = _hub(Clock(), alerts_feed_size=2)
    page = PageStub(set())
    hub.add_viewer(page)
    for seq in range(3):
        hub.take([], [Alert("r", "cam", seq, 1, 2, 1, (), ZoneAnchor.CENTER, ())])
    assert [t["alert"]["seq"] for t in page.texts if t["type"] == "alert"] == [0, 1, 2]
    assert [a["seq"] for a in json.loads(hub.hello())["alerts"]] == [1, 2]


def test_hub_when_viewer_leaves_then_not_offered_anything() -> None:
    clock = Clock()
    hub = _hub(clock)
    page = PageStub({"cam-a"})
    hub.add_viewer(page)
    hub.remove_viewer(page)
    _feed(hub, "cam-a", 1)
    hub.tick()
    hub.send_stats()
    assert (page.tiles, page.texts, page.stats) == ([], [], [])


def test_hub_when_display_changes_then_its_event_set_and_not_kept() -> None:
    hub = _hub(Clock())
    event = hub.changed("cam-a")
    assert hub.changed("cam-a") is event  # every stream of a camera waits on the same one
    _feed(hub, "cam-a", 1)
    assert event.is_set()
    assert hub.changed("cam-a") is not event  # a fresh one for the next change
    assert not hub.changed("cam-a").is_set()


def test_hub_when_camera_leaves_every_page_then_pacer_forgets_it() -> None:
    clock = Clock()
    hub = _hub(clock, tile_fps=5.0)
    page = PageStub({"cam-a"})
    hub.add_viewer(page)
    _feed(hub, "cam-a", 1)
    hub.tick()
    assert hub._pacer.cameras() == {"cam-a"}
    page.cameras = set()
    hub.tick()
    assert hub._pacer.cameras() == set()
    # Back on a page, its picture goes out at once rather than after the old cadence.
    page.cameras = {"cam-a"}
    hub.subscribed(page, {"cam-a"})
    clock.now = 0.05
    hub.tick()
    assert len(page.tiles) == 2


def test_hub_when_page_subscribes_to_unchanged_camera_then_only_it_gets_the_same_tile() -> None:
    clock = Clock()
    made: list[tuple[str, Display]] = []

    def make_tile(camera: str, display: Display) -> tuple[str, Display]:
        made.append((camera, display))
        return camera, display

    hub = LiveHub(LiveSettings(tile_fps=5.0), LiveMetrics(), make_tile, clock)
    first = PageStub({"cam-a"})
    hub.add_viewer(first)
    _feed(hub, "cam-a", 1)
    hub.tick()
    second = PageStub({"cam-a"})
    hub.add_viewer(second)
    hub.subscribed(second, {"cam-a", "cam-unknown"})
    for step in range(1, 5):  # the picture does not change: nothing new is made or sent
        clock.now = step * 0.5
        hub.tick()
    assert len(made) == 1
    assert first.tiles == made
    assert second.tiles == made
    _feed(hub, "cam-a", 2)  # a new picture goes to both, made once
    hub.tick()
    assert len(made) == 2
    assert first.tiles == second.tiles == made


def test_hub_when_picture_changed_since_its_tile_then_subscribe_waits_for_a_new_one() -> None:
    clock = Clock()
    hub = _hub(clock, tile_fps=5.0)
    first = PageStub({"cam-a"})
    hub.add_viewer(first)
    _feed(hub, "cam-a", 1)
    hub.tick()
    _feed(hub, "cam-a", 2)  # not yet due: the page's tile is of seq 1
    hub.tick()
    second = PageStub({"cam-a"})
    hub.add_viewer(second)
    hub.subscribed(second, {"cam-a"})
    assert second.tiles == []  # not the stale tile of seq 1
    clock.now = 0.2
    hub.tick()
    assert [d.frame.seq for _, d in first.tiles] == [1, 2]
    assert [d.frame.seq for _, d in second.tiles] == [2]


def _clip(alert: Alert, status: ClipStatus, uri: str | None = None) -> Clip:
    return Clip(
        alert.rule, alert.camera_id, alert.seq, alert.capture_ts_us, "", 0, 7, status, uri=uri
    )


def test_hub_when_clip_record_of_an_alert_then_pages_get_its_links_and_new_pages_too(
    tmp_path: Path,
) -> None:
    hub = _hub(Clock(), clips_dir=tmp_path)
    page = PageStub(set())
    hub.add_viewer(page)
    alert = Alert("door", "cam", 3, 100, 2, 1, (), ZoneAnchor.CENTER, ())
    hub.take([], [alert])
    hub.take([], [_clip(alert, ClipStatus.WRITTEN, (tmp_path / "cam" / "a.mp4").as_uri())])
    clip = [t for t in page.texts if t["type"] == "clip"][0]
    assert clip["alert"] == {"camera": "cam", "rule": "door", "seq": 3, "capture_ts_us": 100}
    assert clip["clip"]["video"] == {"href": "/clips/cam/a.mp4"}
    assert clip["clip"]["status"] == "WRITTEN"
    assert json.loads(hub.hello())["alerts"][0]["clip"] == clip["clip"]


def test_hub_when_clip_comes_before_its_alert_then_the_alert_carries_it() -> None:
    hub = _hub(Clock())
    page = PageStub(set())
    hub.add_viewer(page)
    alert = Alert("door", "cam", 3, 100, 2, 1, (), ZoneAnchor.CENTER, ())
    other = replace(alert, seq=4)
    hub.take([], [_clip(alert, ClipStatus.NO_VIDEO), alert, other])
    alerts = [t["alert"] for t in page.texts if t["type"] == "alert"]
    assert alerts[0]["clip"]["status"] == "NO_VIDEO"
    assert alerts[0]["clip"]["video"] is None
    assert alerts[1]["clip"] is None  # another seq: not its clip
