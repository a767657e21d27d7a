"""`framebus live` in a real browser: Debian's chromium, driven by Playwright.

1. The real pipeline (decoder -> inferencer -> tracker -> alerts, on the generated scene with its
   colour detector) and `framebus live`: the page shows a tile per camera with its figures, draws
   the boxes where the tracks records say (checked in the screenshot's pixels), and an alert
   appears in the feed.
2. Two pages on a fed camera set: one drops its socket and reconnects mid-stream; the service and
   the other page go on.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import yaml

from framebus.codec import TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Tracks
from framebus_tools.pipeline import CameraSpec, write_cameras_file
from framebus_tools.scene import Scene, scene_rules_document, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from framebus_tools.scenes import default_scene
from tests.integration.browser import edge_hits, hex_rgb
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.integration.livefeed import LiveFeed
from tests.integration.liveserver import LiveLauncher, LiveProcess, Received, live_topics, watch
from tests.integration.scenerun import (
    INPUT_SIZE,
    Topics,
    start_consumers,
    start_decoder,
    stop_all,
)
from tests.reliability.harness import get_json, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.slow]

CAMERAS = ("scene-a", "scene-b")
# Where the run's screenshot is also copied (docs/images/live.png is one, taken so).
SCREENSHOT_ENV = "FRAMEBUS_LIVE_SCREENSHOT"


def _state(page: Any) -> dict[str, Any]:
    state: dict[str, Any] = page.evaluate(
        "() => { const l = window.framebusLive; "
        "return {tiles: l.tiles, alerts: l.alerts, stats: l.stats} }"
    )
    return state


def _boxes_shown(page: Any, after: dict[str, int] | None = None) -> bool:
    """Boxes on every camera's tile (of a frame past `after`'s seq of that camera, when given)."""
    tiles = _state(page)["tiles"]
    return all(
        c in tiles and tiles[c]["boxes"] and (after is None or tiles[c]["seq"] > after[c])
        for c in CAMERAS
    )


def _wait_for_newer_boxes(page: Any) -> None:
    """Wait for boxes on tiles of newer frames than shown now (a tile keeps its last boxes)."""
    shown = {c: tile["seq"] for c, tile in _state(page)["tiles"].items()}
    wait_for(lambda: _boxes_shown(page, shown), 20, "newer frames with boxes on both cameras")


def _figures(page: Any) -> dict[str, dict[str, str]]:
    """Each camera's figures as its tile shows them: data-figure name -> text."""
    figures: dict[str, dict[str, str]] = page.evaluate(
        "cams => Object.fromEntries(cams.map(c => [c, Object.fromEntries(["
        '...document.querySelectorAll(`.tile[data-camera="${c}"] [data-figure]`)]'
        ".map(e => [e.dataset.figure, e.textContent]))]))",
        list(CAMERAS),
    )
    return figures


def _check_boxes_against_records(
    state: dict[str, Any], records: dict[tuple[str, int], Tracks], screenshot: np.ndarray
) -> list[str]:
    """Boxes on every tile, each where its record puts it (scaled), and its outline in pixels."""
    problems = []
    for camera in CAMERAS:
        tile = state["tiles"][camera]
        record = records.get((camera, tile["seq"]))
        if record is None:
            problems.append(f"{camera}#{tile['seq']}: shown, not among {len(records)} records")
            continue
        if not tile["boxes"]:  # zero boxes would match an empty record and check nothing
            problems.append(f"{camera}#{tile['seq']}: no boxes drawn")
        image = tile["image"]
        sx, sy = image["width"] / record.orig_width, image["height"] / record.orig_height
        assert len(tile["boxes"]) == len(record.objects), (camera, tile, record)
        for drawn, obj in zip(tile["boxes"], record.objects, strict=True):
            want = (
                image["left"] + obj.box.x1 * sx,
                image["top"] + obj.box.y1 * sy,
                image["left"] + obj.box.x2 * sx,
                image["top"] + obj.box.y2 * sy,
            )
            got = (drawn["left"], drawn["top"], drawn["right"], drawn["bottom"])
            if max(abs(a - b) for a, b in zip(want, got, strict=True)) > 2:
                problems.append(f"{camera}#{tile['seq']}: drawn {got}, record says {want}")
            if drawn["track"] != "#" + obj.track_id.rsplit("/", 1)[-1]:
                problems.append(f"{camera}: label {drawn['label']} for track {obj.track_id}")
            share = edge_hits(screenshot, drawn, hex_rgb(drawn["colour"]))
            if share < 0.8:
                problems.append(f"{camera}: only {share:.0%} of {drawn} outline in its colour")
    return problems


def _tracks_records(kafka: KafkaSettings, topic: str) -> dict[tuple[str, int], Tracks]:
    """Every record of the tracks topic by (camera, seq), once the processes writing it stopped:
    read until nothing more comes for a while, not just the first batch."""
    codec = TracksCodec()
    messages = read_topic(kafka, topic, 1, timeout_s=30, settle_s=2.0)
    return {(r.camera_id, r.seq): r for r in (codec.decode(m.value()) for m in messages)}


def test_live_page_when_real_pipeline_runs_then_tiles_boxes_figures_and_alerts_shown(
    kafka: KafkaSettings,
    topics: TopicFactory,
    media_dir: Path,
    tmp_path: Path,
    browser: Any,
    launch_live: LiveLauncher,
) -> None:
    scene: Scene = default_scene()
    video = media_dir / "scene-720p.mp4"
    if not video.exists():
        write_scene_video(video, scene)
    model = write_color_blob_model(tmp_path / "colour-blobs.onnx", scene, INPUT_SIZE)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(scene_rules_document(scene, dwell_s=2.0)), encoding="utf-8")
    t = Topics(topics(detections_partitions=2))
    services = start_consumers(kafka, t, rules, model, tmp_path)
    try:
        # The tracker's and the alerts' topics, by the names the processes above were given.
        lt = live_topics(kafka, t.names, partitions=2)
        live = launch_live(t.names, lt, tmp_path / "live.log")
        services["live"] = live.service
        page = browser.new_page()
        page.goto(live.url + "/")
        page.wait_for_function("() => window.framebusLive.connected")
        cameras = write_cameras_file(
            tmp_path / "cameras.yaml",
            [CameraSpec(c, str(video), 5.0, {"realtime": True}) for c in CAMERAS],
        )
        services["decoder"] = start_decoder(kafka, t.names, cameras, tmp_path)
        # Frames reach the page, with boxes on both cameras, and an alert (the line crossing at
        # ~3.2 s of the scene, the dwell at ~3.6 s) reaches the feed.
        wait_for(lambda: _boxes_shown(page), 60, "boxes on both cameras")
        page.wait_for_selector("#alerts li.alert", timeout=30_000)
        _wait_for_newer_boxes(page)
        page.click("#pause")
        time.sleep(0.5)  # a tile already decoding lands; then nothing changes
        state = _state(page)
        shot_path = tmp_path / "live.png"
        page.screenshot(path=str(shot_path), full_page=True)
        figures = _figures(page)
        states = {c: page.inner_text(f'.tile[data-camera="{c}"] .state') for c in CAMERAS}
        feed = page.inner_text("#alerts")
        page.click("#pause")
        assert services["decoder"].wait(60) == 0, services["decoder"].text()[-2000:]
        assert get_json(f"{live.url}/healthz")[0] == 200
    finally:
        codes = stop_all(services)
    assert codes == dict.fromkeys(services, 0), {
        n: services[n].text()[-2000:] for n, c in codes.items() if c
    }
    if os.environ.get(SCREENSHOT_ENV):
        shutil.copy(shot_path, os.environ[SCREENSHOT_ENV])
    assert sorted(state["tiles"]) == sorted(CAMERAS)
    assert all(s == "live" for s in states.values()), states
    assert state["alerts"] and state["alerts"][0]["camera"] in CAMERAS
    assert state["alerts"][0]["rule_type"] in feed
    for camera in CAMERAS:
        figs = figures[camera]
        assert "/s" in figs["fps_in"] and "/s" in figs["fps_out"], (camera, figs)
        assert figs["p50_ms"].endswith(" ms") and figs["source"] == "tracks", (camera, figs)
        assert state["stats"][camera]["p50_ms"] is not None
        assert state["stats"][camera]["source"] == "tracks"
    screenshot = cv2.cvtColor(cv2.imread(str(shot_path)), cv2.COLOR_BGR2RGB)
    problems = _check_boxes_against_records(state, _tracks_records(kafka, lt.tracks), screenshot)
    assert not problems, "\n".join(problems)


def _watch_apart(url: str, seconds: float, cameras: list[str]) -> Received:
    """`watch` on a thread of its own: Playwright's sync API runs an event loop on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(watch(url, seconds, cameras))).result()


def _frames_shown(page: Any) -> int:
    shown: int = page.evaluate("() => window.framebusLive.framesShown")
    return shown


def _keeps_getting_frames(page: Any, more: int, what: str) -> None:
    before = _frames_shown(page)
    wait_for(lambda: _frames_shown(page) >= before + more, 20, what)


def test_live_page_when_a_viewer_reconnects_mid_stream_then_service_and_other_viewer_go_on(
    kafka: KafkaSettings,
    topics: TopicFactory,
    tmp_path: Path,
    browser: Any,
    launch_live: LiveLauncher,
) -> None:
    names = topics()
    lt = live_topics(kafka, names)
    live: LiveProcess = launch_live(names, lt, tmp_path / "live.log")
    feed = LiveFeed(kafka, lt, ["cam-1", "cam-2", "cam-3"]).start()
    try:
        first, second = browser.new_page(), browser.new_page()
        for page in (first, second):
            page.goto(live.url + "/")
        _keeps_getting_frames(first, 10, "frames on the first page")
        _keeps_getting_frames(second, 10, "frames on the second page")
        assert live.metric("framebus_live_viewers") == 2
        # The second page's socket drops mid-stream: the page reconnects by itself.
        second.evaluate("() => window.framebusLive.socket.close()")
        _keeps_getting_frames(first, 10, "frames on the first page while the second is away")
        second.wait_for_function("() => window.framebusLive.connected", timeout=10_000)
        _keeps_getting_frames(second, 10, "frames on the second page after it reconnected")
        # Then it goes away for good (the tab closes), and comes back as a new page.
        second.close()
        _keeps_getting_frames(first, 10, "frames on the first page after the second closed")
        wait_for(lambda: live.metric("framebus_live_viewers") == 1, 10, "one viewer left")
        third = browser.new_page()
        third.goto(live.url + "/")
        _keeps_getting_frames(third, 10, "frames on a new page")
        _keeps_getting_frames(first, 10, "frames on the first page throughout")
        tiles = first.locator(".tile")
        assert sorted(tiles.evaluate_all("ts => ts.map(t => t.dataset.camera)")) == [
            "cam-1",
            "cam-2",
            "cam-3",
        ]
        assert get_json(f"{live.url}/healthz")[0] == 200
        assert live.metric("framebus_live_viewer_connections_total") == 4
    finally:
        feed.close()
    assert live.service.stop() == 0


def test_live_page_when_64_cameras_then_paged_16_at_a_time_and_each_page_gets_its_frames(
    kafka: KafkaSettings,
    topics: TopicFactory,
    tmp_path: Path,
    browser: Any,
    launch_live: LiveLauncher,
) -> None:
    names = topics(frames_partitions=4, detections_partitions=4)
    lt = live_topics(kafka, names, partitions=4)
    live = launch_live(names, lt, tmp_path / "live.log")
    cameras = [f"cam-{i:02d}" for i in range(64)]
    feed = LiveFeed(kafka, lt, cameras, fps=1.0, size=160).start()
    try:
        page = browser.new_page()
        page.goto(live.url + "/")
        page.wait_for_function("() => window.framebusLive.cameras.length === 64", timeout=30_000)
        assert page.inner_text("#page-label") == "page 1 of 4"
        for number, wanted in ((1, cameras[:16]), (2, cameras[16:32])):
            shown = page.locator(".tile").evaluate_all("ts => ts.map(t => t.dataset.camera)")
            assert shown == wanted, (number, shown)
            page.wait_for_function(
                "cams => cams.every(c => (window.framebusLive.tiles[c] || {}).framesShown >= 1)",
                arg=wanted,
                timeout=30_000,
            )
            if number == 1:
                page.click("#next")
        # Only the cameras on some page are encoded: 16 at 5/s is within the 80/s budget.
        assert live.metric("framebus_live_tile_interval_seconds") == pytest.approx(0.2)
        # The page drops tiles of cameras it does not show, so ask the server itself: a socket
        # subscribed to the first page gets tiles of those cameras and of no other.
        got = _watch_apart(live.url, 3.0, cameras[:16])
        sent = {header["camera"] for header, _ in got.tiles}
        assert sent, "no tiles on a socket subscribed to the first page"
        assert sent <= set(cameras[:16]), f"tiles of cameras on no page: {sent - set(cameras[:16])}"
    finally:
        feed.close()
    assert live.service.stop() == 0
