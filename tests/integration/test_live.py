"""`framebus live` as a process on the real broker: /ws, /mjpeg, /metrics, bad records, slow pages.

The feed letterboxes 1280x720 frames with a solid rectangle per camera into a 320x320 model input
and publishes each frame's detections (and, for some cameras, tracks) records with a box exactly
on the rectangle, so the tests can check that tiles and boxes line up.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from framebus.kafka.settings import KafkaSettings
from tests.integration.conftest import TopicFactory
from tests.integration.livefeed import BLOB_RGB, ORIG_H, ORIG_W, LiveFeed, blob_box
from tests.integration.liveserver import (
    LiveLauncher,
    LiveProcess,
    http_status,
    live_topics,
    watch,
)
from tests.reliability.harness import get_json, wait_for

pytestmark = pytest.mark.integration

CYAN = (0, 255, 255)  # the palette's colour of class 0, as drawn by /mjpeg


def _rgb(jpeg: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None, "not a JPEG"
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


def _near(pixel: np.ndarray, rgb: tuple[int, int, int], tolerance: int = 60) -> bool:
    return int(np.abs(pixel.astype(int) - np.array(rgb)).sum()) <= tolerance


def test_live_when_records_flow_then_page_socket_gets_paired_tiles_figures_and_alerts(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, launch_live: LiveLauncher
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    live = launch_live(names, t, tmp_path / "live.log", tile_fps=5)
    feed = LiveFeed(kafka, t, ["cam-a", "cam-b"], tracked=frozenset({"cam-a"}), stale_every=4)
    feed.start()
    try:
        got = asyncio.run(watch(live.url, 8.0, ["cam-a", "cam-b"]))
    finally:
        feed.close()
    hello = got.of_type("hello")[0]
    assert hello["version"] == 1 and hello["page_size"] == 16
    tiles = {cam: [h for h, _ in got.tiles if h["camera"] == cam] for cam in ("cam-a", "cam-b")}
    assert all(len(v) >= 5 for v in tiles.values()), {k: len(v) for k, v in tiles.items()}
    assert all(got.boxes_before_tile), "every tile comes right after the boxes of its frame"
    # The letterbox (320x320, the 1280x720 picture at 320x180 with 70 px bands) is cut off.
    assert {(h["width"], h["height"]) for h, _ in got.tiles} == {(320, 180)}
    # Each tile's rectangle is where its frame's record says, after scaling to the tile.
    for header, jpeg in got.tiles[-6:]:
        det = feed.sent[(header["camera"], header["seq"])]
        image = _rgb(jpeg)
        for b in det.boxes:
            cx, cy = (b.x1 + b.x2) / 2 * 320 / ORIG_W, (b.y1 + b.y2) / 2 * 180 / ORIG_H
            assert _near(image[round(cy), round(cx)], BLOB_RGB), (
                header,
                image[round(cy), round(cx)],
            )
    boxes = {(m["camera"], m["seq"]): m for m in got.of_type("boxes")}
    tracked = [m for (cam, _), m in boxes.items() if cam == "cam-a" and m["boxes"]]
    assert tracked and all(m["source"] == "tracks" for m in tracked[-3:])
    assert tracked[-1]["boxes"][0]["track"] == "#1"
    plain = [m for (cam, _), m in boxes.items() if cam == "cam-b" and m["boxes"]]
    assert plain and all(m["source"] == "detections" and not m["boxes"][0]["track"] for m in plain)
    last = got.of_type("stats")[-1]["cameras"]
    assert set(last) == {"cam-a", "cam-b"}
    for figures in last.values():
        assert figures["state"] == "live"
        assert figures["frames_in"] >= 10 and figures["records_out"] >= 10
        assert 40 <= figures["p50_ms"] <= 49 and 40 <= figures["p99_ms"] <= 49
        assert figures["drops"].get("DROPPED_STALE", 0) >= 2
    alerts = [m["alert"] for m in got.of_type("alert")]
    assert alerts and alerts[0]["camera"] == "cam-a" and alerts[0]["rule_type"] == "DWELL"
    assert live.metric("framebus_live_tiles_sent_total") >= 10
    assert live.metric("framebus_live_frames_received_total", camera_id="cam-a") >= 10
    assert live.service.stop() == 0


def _mjpeg_parts(url: str, parts: int, timeout_s: float = 20.0) -> tuple[str, list[bytes]]:
    """(Content-Type, the first `parts` JPEGs) of a multipart/x-mixed-replace stream."""
    host, port_path = url.removeprefix("http://").split(":", 1)
    port, path = port_path.split("/", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(f"GET /{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        data = b""
        deadline = time.monotonic() + timeout_s
        while data.count(b"\xff\xd9") < parts and time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].decode()
    content_type = next(
        line.split(":", 1)[1].strip()
        for line in head.splitlines()
        if line.lower().startswith("content-type")
    )
    jpegs = []
    for part in data.split(b"--framebus-frame")[1:]:
        if b"\r\n\r\n" in part:
            body = part.split(b"\r\n\r\n", 1)[1]
            end = body.find(b"\xff\xd9")
            if end >= 0:
                jpegs.append(body[: end + 2])
    return content_type, jpegs[:parts]


def test_live_when_mjpeg_asked_then_stream_of_frames_with_boxes_drawn_on_server(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, launch_live: LiveLauncher
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    live = launch_live(names, t, tmp_path / "live.log")
    feed = LiveFeed(kafka, t, ["cam-m"]).start()
    try:
        seen = lambda: live.metric("framebus_live_frames_received_total", camera_id="cam-m") > 0  # noqa: E731
        wait_for(seen, 20, "cam-m seen")
        content_type, jpegs = _mjpeg_parts(f"{live.url}/mjpeg/cam-m?fps=5&height=144&boxes=1", 3)
    finally:
        feed.close()
    assert content_type.startswith("multipart/x-mixed-replace")
    assert len(jpegs) == 3
    image = _rgb(jpegs[-1])
    assert image.shape[:2] == (144, 256)
    # The rectangle's top edge is drawn in the palette's cyan, somewhere along it.
    rows = image[40:52]  # y1 = 200 of 720 -> 40 of 144
    assert any(_near(px, CYAN, 90) for row in rows for px in row), "no box drawn"
    assert live.metric("framebus_live_mjpeg_frames_sent_total") >= 3
    assert http_status(f"{live.url}/mjpeg/cam-m?fps=zero") == 400
    assert http_status(f"{live.url}/mjpeg/no-such-camera") == 404
    assert live.service.stop() == 0


def test_live_when_records_cannot_be_decoded_then_counted_logged_and_service_goes_on(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, launch_live: LiveLauncher
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    live = launch_live(names, t, tmp_path / "live.log")
    feed = LiveFeed(kafka, t, ["cam-x"]).start()
    try:
        for topic in (t.frames, t.detections, t.tracks, t.alerts):
            feed.produce(topic, "cam-x", b"not an avro record")
        wait_for(lambda: live.metric("framebus_live_bad_records_total") >= 4, 20, "4 bad records")
        before = live.metric("framebus_live_frames_received_total", camera_id="cam-x")
        wait_for(
            lambda: (
                live.metric("framebus_live_frames_received_total", camera_id="cam-x") >= before + 5
            ),
            20,
            "frames still read",
        )
    finally:
        feed.close()
    assert get_json(f"{live.url}/healthz")[0] == 200
    for kind in ("frames", "boxes", "alerts"):
        assert live.metric("framebus_live_bad_records_total", kind=kind) >= 1, kind
    assert "undecodable record skipped" in live.service.text()
    assert live.service.stop() == 0


async def _stalled_and_reading(live: LiveProcess, seconds: float) -> tuple[int, float]:
    """A page that never reads its socket beside one that does: tiles the reading one got, and
    the viewers gauge while both are connected."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        stalled = await session.ws_connect(f"{live.url}/ws", autoclose=False, autoping=False)
        await stalled.send_str('{"type": "subscribe", "cameras": ["cam-s0", "cam-s1"]}')
        reading = asyncio.create_task(watch(live.url, seconds, ["cam-s0", "cam-s1"]))
        await asyncio.sleep(2.0)
        viewers = await asyncio.to_thread(live.metric, "framebus_live_viewers")
        got = await reading
        await stalled.close()
    return len(got.tiles), viewers


def test_live_when_a_page_stops_reading_then_its_tiles_drop_and_the_other_page_goes_on(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, launch_live: LiveLauncher
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    # Incompressible 640x360 tiles at 10/s per camera fill the stalled socket's buffers quickly.
    live = launch_live(names, t, tmp_path / "live.log", tile_fps=10, jpeg_quality=95)
    feed = LiveFeed(kafka, t, ["cam-s0", "cam-s1"], fps=10, size=640, noise=True).start()
    try:
        tiles, viewers = asyncio.run(_stalled_and_reading(live, 12.0))
    finally:
        feed.close()
    assert tiles >= 30, tiles  # the reading page keeps getting both cameras (feed: ~2-5/s each)
    assert viewers == 2, viewers  # the stalled page stays connected beside the reading one
    assert live.metric("framebus_live_tiles_dropped_total") > 0
    # Both pages gone, nothing left behind (the server sees the sockets close a little later).
    wait_for(lambda: live.metric("framebus_live_viewers") == 0, 10, "no viewers left")
    assert live.service.stop() == 0


def test_live_when_frames_are_still_then_last_full_picture_shown_with_carried_boxes(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, launch_live: LiveLauncher
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    live = launch_live(names, t, tmp_path / "live.log", tile_fps=10)
    feed = LiveFeed(kafka, t, ["cam-s"], fps=10, tracked=frozenset({"cam-s"}), still_every=4)
    feed.start()
    try:
        got = asyncio.run(watch(live.url, 6.0, ["cam-s"]))
    finally:
        feed.close()
    boxes = {m["seq"]: m for m in got.of_type("boxes")}
    still_tiles = [(h, jpeg) for h, jpeg in got.tiles if h["seq"] % 4 and boxes[h["seq"]]["boxes"]]
    assert len(still_tiles) >= 3, [h["seq"] for h, _ in got.tiles]
    for header, jpeg in still_tiles[-3:]:
        message = boxes[header["seq"]]
        assert message["status"] == "STILL" and message["boxes"][0]["carried"] is True
        # The picture is the last full frame's: its blob where that frame had it.
        shown = blob_box(0, header["seq"] - header["seq"] % 4)
        image = _rgb(jpeg)
        cx, cy = (shown.x1 + shown.x2) / 2 * 320 / ORIG_W, (shown.y1 + shown.y2) / 2 * 180 / ORIG_H
        assert _near(image[round(cy), round(cx)], BLOB_RGB), header
    figures = got.of_type("stats")[-1]["cameras"]["cam-s"]
    assert figures["still"] >= 10 and "STILL" not in figures["drops"]
    assert live.metric("framebus_live_bad_records_total", kind="frames") == 0
    assert live.service.stop() == 0
