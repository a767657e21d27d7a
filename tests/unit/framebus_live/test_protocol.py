from __future__ import annotations

import json

from framebus.messages import Box, FrameStatus
from framebus_live import protocol
from framebus_live.records import BoxesRecord, LiveBox
from framebus_live.settings import LiveSettings
from framebus_live.stats import CameraFigures


def test_tile_message_when_parsed_then_header_and_jpeg_back() -> None:
    data = protocol.tile_message("cam-1", 7, 320, 180, b"\xff\xd8jpeg\xff\xd9")
    header, jpeg = protocol.parse_tile(data)
    assert header == {"camera": "cam-1", "seq": 7, "width": 320, "height": 180}
    assert jpeg == b"\xff\xd8jpeg\xff\xd9"


def test_boxes_message_when_tracks_then_labels_and_original_size() -> None:
    box = LiveBox(Box(1.0, 2.0, 30.0, 40.0, 0, "person", 0.91234), "#7", True)
    record = BoxesRecord("c", 3, 9, FrameStatus.INFERRED, 1280, 720, 41.26, (box,), "tracks")
    body = json.loads(protocol.boxes_message(record, "c", 3))
    assert body["orig_width"] == 1280 and body["source"] == "tracks"
    assert body["boxes"][0]["track"] == "#7" and body["boxes"][0]["score"] == 0.912


def test_boxes_message_when_no_record_then_empty_boxes() -> None:
    assert json.loads(protocol.boxes_message(None, "c", 3))["boxes"] == []


def test_subscribe_when_more_cameras_than_page_then_capped_and_junk_ignored() -> None:
    text = json.dumps({"type": "subscribe", "cameras": [f"c{i}" for i in range(40)]})
    assert protocol.parse_subscribe(text, 16) == [f"c{i}" for i in range(16)]
    assert protocol.parse_subscribe("not json", 16) is None
    assert protocol.parse_subscribe('{"type": "subscribe", "cameras": 3}', 16) is None


def test_stats_message_when_figures_then_per_camera_fields() -> None:
    figures = CameraFigures(10, 9, 5.0, 4.5, 40.0, 80.0, {"FAILED": 1}, "live", "tracks")
    body = json.loads(protocol.stats_message({"c": figures}))
    assert body["cameras"]["c"]["drops"] == {"FAILED": 1}
    assert body["cameras"]["c"]["state"] == "live"


def test_settings_when_from_env_then_fields_named_framebus_upper() -> None:
    from framebus.settings import load

    settings = load(
        LiveSettings,
        {"FRAMEBUS_LIVE_SOURCE": "tracks", "FRAMEBUS_TILE_FPS": "2", "FRAMEBUS_HTTP_PORT": "9000"},
    )
    assert (settings.live_source.value, settings.tile_fps, settings.http_port) == (
        "tracks",
        2.0,
        9000,
    )
