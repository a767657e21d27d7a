"""`framebus render` over real Kafka: boxes drawn where the records say, labelled with track ids."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest

from framebus.codec import DetectionsCodec, TracksCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import short_track_label
from framebus.topology import TopicSettings
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_inferencer import service as inferencer_service
from framebus_inferencer.settings import InferencerSettings
from framebus_tools.cli import main
from framebus_tools.render.draw import (
    class_colour,
    line_thickness,
    sheet_cell_origin,
)
from framebus_tools.synthetic import MovingSquare, write_square_video
from framebus_tracker import service as tracker_service
from framebus_tracker.settings import TrackerSettings
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic

pytestmark = pytest.mark.integration

SCENE = MovingSquare(width=640, height=360, side=60, frames=12, fps=25)
COLUMNS = 4


def run_pipeline(kafka: KafkaSettings, names: TopicSettings, video: Path, model: Path) -> list[Any]:
    stop = threading.Event()
    inferencer = threading.Thread(
        target=inferencer_service.run,
        args=(
            InferencerSettings(
                kafka=kafka,
                topics=names,
                model_path=model,
                consumer_group=f"g-{names.frames_topic}",
            ),
            stop,
        ),
    )
    inferencer.start()
    try:
        decoder = DecoderSettings(
            kafka=kafka,
            topics=names,
            camera_id="cam-r",
            camera_url=str(video),
            target_fps=0,
        )
        assert decoder_service.run(decoder) == 0
        return read_topic(kafka, names.detections_topic, SCENE.frames)
    finally:
        stop.set()
        inferencer.join(30)


def test_render_when_sheet_and_clip_from_real_pipeline_then_boxes_drawn_where_records_say(
    kafka: KafkaSettings, topics: TopicFactory, media_dir: Path, square_model: Path, tmp_path: Path
) -> None:
    video = write_square_video(media_dir / "square-360p-render.mp4", SCENE)
    names = topics()
    records = [
        DetectionsCodec().decode(m.value()) for m in run_pipeline(kafka, names, video, square_model)
    ]
    by_seq = {d.seq: d for d in records}
    assert sorted(by_seq) == list(range(SCENE.frames))
    common = [
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--frames-topic", names.frames_topic,
        "--detections-topic", names.detections_topic,
        "--camera", "cam-r",
    ]  # fmt: skip

    sheet_path = tmp_path / "sheet.png"
    sheet_args = ["--sheet-columns", str(COLUMNS), "--thumb-width", "640"]
    assert main(["render", *common, "--out", str(sheet_path), *sheet_args]) == 0
    sheet = cv2.cvtColor(cv2.imread(str(sheet_path)), cv2.COLOR_BGR2RGB)
    t = line_thickness(640, 360)
    green = np.array(class_colour(0), np.uint8)
    for seq in range(SCENE.frames):
        x0, y0 = sheet_cell_origin(seq, COLUMNS, 640, 360)
        cell = sheet[y0 : y0 + 360, x0 : x0 + 640]
        ys, xs = np.nonzero(np.all(cell == green, axis=-1))
        assert xs.size, f"no box drawn in frame {seq}"
        drawn = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        [box] = by_seq[seq].boxes
        recorded = (box.x1, box.y1, box.x2, box.y2)
        # The outline is centred on the record's edges: within the line width of them.
        assert all(abs(d - r) <= t for d, r in zip(drawn, recorded, strict=True)), (
            seq,
            drawn,
            recorded,
        )

    clip_path = tmp_path / "clip.mp4"
    assert main(["render", *common, "--out", str(clip_path), "--max-frames", "5"]) == 0
    with av.open(str(clip_path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 5
    assert frames[0].shape == (360, 640, 3)
    # The last frame of the clip is the camera's last frame: its box outline is there. H.264 is
    # lossy, so look for strongly green pixels, in rows and columns the label above the box
    # cannot reach: the middle rows show the left and right edges, the lower rows the bottom one.
    [box] = by_seq[SCENE.frames - 1].boxes
    last = frames[-1].astype(int)
    greenish = (last[:, :, 1] > 180) & (last[:, :, 0] < 90) & (last[:, :, 2] < 90)
    mid_y, mid_x = int((box.y1 + box.y2) / 2), int((box.x1 + box.x2) / 2)
    xs = np.nonzero(greenish[mid_y - 5 : mid_y + 5].any(axis=0))[0]
    ys = np.nonzero(greenish[mid_y:, mid_x - 5 : mid_x + 5].any(axis=1))[0] + mid_y
    assert abs(xs.min() - box.x1) <= t + 1 and abs(xs.max() + 1 - box.x2) <= t + 1
    assert abs(ys.max() + 1 - box.y2) <= t + 1


def run_tracker(kafka: KafkaSettings, names: TopicSettings) -> list[Any]:
    """The tracker, in a thread, over the detections already on the topic; its tracks records."""
    stop = threading.Event()
    tracks_topic = names.tracks_topic
    settings = TrackerSettings(
        kafka=kafka,
        topics=names,
        tracker_group=f"trk-{tracks_topic}",
        transactional_id=f"tx-{tracks_topic}",
    )
    tracker = threading.Thread(target=tracker_service.run, args=(settings, stop))
    tracker.start()
    try:
        return read_topic(kafka, tracks_topic, SCENE.frames)
    finally:
        stop.set()
        tracker.join(30)


def label_widths(sheet: np.ndarray, colour: tuple[int, int, int]) -> list[int]:
    """Per contact-sheet cell, the width of the box label's background (a darker box colour)."""
    dark = np.array([c // 2 for c in colour], np.uint8)
    widths = []
    for seq in range(SCENE.frames):
        x0, y0 = sheet_cell_origin(seq, COLUMNS, 640, 360)
        xs = np.nonzero(np.all(sheet[y0 : y0 + 360, x0 : x0 + 640] == dark, axis=-1))[1]
        widths.append(int(xs.max() - xs.min() + 1) if xs.size else 0)
    return widths


def test_render_when_tracks_on_topic_then_boxes_labelled_with_short_track_ids(
    kafka: KafkaSettings,
    topics: TopicFactory,
    media_dir: Path,
    square_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    video = write_square_video(media_dir / "square-360p-render-tracks.mp4", SCENE)
    names = topics()
    run_pipeline(kafka, names, video, square_model)
    tracks = [TracksCodec().decode(m.value()) for m in run_tracker(kafka, names)]
    assert sorted(t.seq for t in tracks) == list(range(SCENE.frames))
    # Files decoded as fast as they read have capture times microseconds apart, which can split
    # a track: each frame's label is its own record's id.
    label_of = {t.seq: short_track_label(o.track_id) for t in tracks for o in t.objects}
    common = [
        "--bootstrap-servers", kafka.bootstrap_servers,
        "--frames-topic", names.frames_topic,
        "--detections-topic", names.detections_topic,
        "--tracks-topic", names.tracks_topic,
        "--camera", "cam-r",
        "--sheet-columns", str(COLUMNS),
        "--thumb-width", "640",
    ]  # fmt: skip

    tracked_path, plain_path = tmp_path / "tracked.png", tmp_path / "plain.png"
    capsys.readouterr()
    assert main(["render", *common, "--out", str(tracked_path)]) == 0  # auto: tracks
    assert f"{SCENE.frames} frames with track ids" in capsys.readouterr().out
    assert main(["render", *common, "--out", str(plain_path), "--render-source", "detections"]) == 0
    assert "0 frames with track ids" in capsys.readouterr().out
    tracked, plain = (
        cv2.cvtColor(cv2.imread(str(p)), cv2.COLOR_BGR2RGB) for p in (tracked_path, plain_path)
    )
    green = class_colour(0)
    # "#1 square 1.00" against "square 1.00": the label grows by the short id, in every frame.
    for seq, (w_tracked, w_plain) in enumerate(
        zip(label_widths(tracked, green), label_widths(plain, green), strict=True)
    ):
        (extra, _), _ = cv2.getTextSize(f"{label_of[seq]} ", cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        assert w_plain > 0, f"no label in frame {seq}"
        assert abs(w_tracked - w_plain - extra) <= 2, (seq, label_of[seq], w_tracked, w_plain)
    # The boxes themselves are where they were: only the labels differ.
    outline = np.all(tracked == np.array(green, np.uint8), axis=-1)
    assert np.array_equal(outline, np.all(plain == np.array(green, np.uint8), axis=-1))
