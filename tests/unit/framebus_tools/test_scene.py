"""The generated scene's ground truth, and the colour detector that must find its actors.

Default scene ground truth (checked below): person IN 2, person OUT 1, car OUT 1; the green
person's anchor is in the dwell zone from 1.546 s to 6.455 s; two persons are in the occupancy
band from 2.290 s to 5.211 s.
"""

from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import yaml

from framebus.letterbox import PAD_VALUE, Letterbox, boxes_to_original
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.source import letterbox_frame
from framebus_inferencer.postprocess import Decoder, cxcywh_to_xyxy
from framebus_inferencer.settings import HeadFormat
from framebus_tools.scene import (
    BACKGROUND_LEVEL,
    LIT_LEVEL,
    PERSON_SIZE,
    SCENE_CLASS_NAMES,
    Actor,
    Box,
    Scene,
    scene_rules_document,
    write_scene_video,
)
from framebus_tools.scene_model import COLOUR_TOLERANCE, color_blob_model
from framebus_tools.scenes import default_scene, still_scene

RED, BLUE, GREEN, CAR, MAGENTA = range(5)
CROSSING_T = 3.6  # the two walkers overlap by about half a box width
CLIP = (3.4, 4.2)  # encoded part: the walkers meet, the green person stands in the zone


@pytest.fixture(scope="module")
def scene() -> Scene:
    return default_scene()


@pytest.fixture(scope="module")
def session(scene: Scene) -> ort.InferenceSession:
    model = color_blob_model(scene)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def iou(a: Box, b: Box) -> float:
    iw = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def model_input(hwc: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    return (hwc.transpose(2, 0, 1)[None].astype(np.float32) / 255).astype(np.float32)


def found_boxes(
    out: npt.NDArray[np.float32], lb: Letterbox, scene: Scene
) -> dict[int, tuple[npt.NDArray[np.float32], str]]:
    """Each anchor that scored, as its box in original pixels and its class name."""
    found = {}
    for k in range(out.shape[1]):
        scores = out[4:, k]
        if scores.max() > 0.5:
            xyxy = cxcywh_to_xyxy(out[:4, k][None].astype(np.float32))
            box = boxes_to_original(xyxy, lb.scale, lb.pad_x, lb.pad_y, scene.width, scene.height)
            found[k] = (box[0], SCENE_CLASS_NAMES[int(scores.argmax())])
    return found


def assert_actors_found(
    scene: Scene, t_s: float, out: npt.NDArray[np.float32], lb: Letterbox
) -> float:
    """Every visible actor found by its own anchor with its class, within 4 px; return worst error."""
    found = found_boxes(out, lb, scene)
    visible = {k: scene.visible_box_at(k, t_s) for k in range(len(scene.actors))}
    assert set(found) == {k for k, b in visible.items() if b is not None}, t_s
    worst = 0.0
    for k, (box, cls) in found.items():
        assert cls == scene.actors[k].cls
        err = float(np.abs(box - np.array(visible[k])).max())
        assert err <= 4, (t_s, scene.actors[k].name, box, visible[k])
        worst = max(worst, err)
    return worst


def test_default_scene_when_lines_crossed_then_two_in_and_one_out_for_persons(scene: Scene) -> None:
    assert scene.expected_crossings() == {"person:IN": 2, "person:OUT": 1, "car:OUT": 1}
    # The red walker goes towards +x: side goes from + to - of the top-to-bottom line: OUT.
    assert [d for _, d in scene.crossings(RED)] == ["OUT"]
    assert [d for _, d in scene.crossings(BLUE)] == ["IN"]
    assert scene.crossings(GREEN) == []
    (t_blue, _), (t_red, _) = scene.crossings(BLUE)[0], scene.crossings(RED)[0]
    assert 3.1 < t_blue < 3.3 and 4.2 < t_red < 4.4


def test_default_scene_when_green_person_dwells_then_true_times_bracket_a_4s_hold(
    scene: Scene,
) -> None:
    enter, leave = scene.dwell_truth(GREEN)
    assert enter == pytest.approx(1.546, abs=0.002) and leave == pytest.approx(6.455, abs=0.002)
    held = {scene.box_at(GREEN, t) for t in np.arange(2.0, 6.0, 0.1)}
    assert len(held) == 1  # standing still from 2 s to 6 s
    ((start, end),) = scene.occupancy_truth()
    assert start == pytest.approx(2.29, abs=0.002) and end == pytest.approx(5.211, abs=0.002)


def test_default_scene_when_walkers_meet_then_boxes_overlap_partly_and_never_merge(
    scene: Scene,
) -> None:
    overlaps = []
    for t in np.arange(1.0, 6.5, 0.04):
        a, b = scene.box_at(RED, t), scene.box_at(BLUE, t)
        assert a is not None and b is not None
        overlaps.append(iou(a, b))
    assert 0.2 < max(overlaps) < 0.45  # under the inferencer's class-aware NMS threshold
    # The red box hidden in part by the blue one in front still shows its full extent.
    assert scene.visible_box_at(RED, CROSSING_T) == scene.box_at(RED, CROSSING_T)
    assert iou(scene.box_at(RED, CROSSING_T), scene.box_at(BLUE, CROSSING_T)) > 0  # type: ignore[arg-type]


def test_default_scene_when_walking_then_one_to_two_box_widths_per_half_second(
    scene: Scene,
) -> None:
    for k in (RED, BLUE, MAGENTA):
        a, b = (
            scene.box_at(k, 11.0 if k == MAGENTA else 3.0),
            scene.box_at(k, 11.5 if k == MAGENTA else 3.5),
        )
        assert a is not None and b is not None
        assert PERSON_SIZE[0] <= abs(b[0] - a[0]) <= 2 * PERSON_SIZE[0]


def test_scene_when_rendered_then_actors_drawn_at_their_true_boxes_on_dark_background(
    scene: Scene,
) -> None:
    img = scene.render(CROSSING_T)
    x1, y1, x2, y2 = scene.box_at(RED, CROSSING_T)  # type: ignore[misc]
    assert (img[y1, x1:x2] == scene.actors[RED].colour).all()  # top row, not hidden
    bx1, by1, bx2, by2 = scene.box_at(BLUE, CROSSING_T)  # type: ignore[misc]
    assert (img[by1:by2, bx1:bx2] == scene.actors[BLUE].colour).all()  # drawn in front
    assert (img[0, 0] == BACKGROUND_LEVEL).all() and scene.box_at(CAR, CROSSING_T) is None


def test_scene_when_keyframe_leaves_the_frame_then_refused() -> None:
    walker = Actor("w", "person", (200, 0, 0), PERSON_SIZE, ((0.0, 0, 0), (1.0, 1250, 0)))
    with pytest.raises(ValueError, match="leaves the frame"):
        Scene(actors=(walker,), line=((0, 0), (0, 1)), zone=(), occupancy_zone=())


def test_color_blob_model_when_colours_repeat_then_refused() -> None:
    with pytest.raises(ValueError, match="own colour"):
        color_blob_model([((200, 0, 0), "person"), ((200, 0, 0), "car")])


def test_color_blob_model_when_colours_compared_then_far_from_each_other_pad_and_background(
    scene: Scene,
) -> None:
    others = [a.colour for a in scene.actors] + [(PAD_VALUE,) * 3, (BACKGROUND_LEVEL,) * 3]
    for a in scene.actors:
        for c in others:
            if c != a.colour:
                assert (
                    max(abs(p - q) for p, q in zip(a.colour, c, strict=True)) / 255
                    > COLOUR_TOLERANCE + 0.05
                )


@pytest.mark.parametrize("t_s", [0.0, 2.5, CROSSING_T, 9.0, 11.0, 13.4, 13.9])
def test_color_blob_model_when_rendered_frame_letterboxed_then_each_actor_boxed(
    scene: Scene, session: ort.InferenceSession, t_s: float
) -> None:
    buffer = LetterboxBuffer(640, 640)
    lb = buffer.fill_rgb(scene.render(t_s))
    (out,) = session.run(None, {"images": model_input(buffer.hwc)})
    assert out.shape == (1, 4 + len(SCENE_CLASS_NAMES), len(scene.actors))
    assert assert_actors_found(scene, t_s, out[0], lb) <= 2  # 1 model pixel: exact at 2x


def test_color_blob_model_when_h264_clip_decoded_like_the_decoder_then_boxes_within_4px(
    scene: Scene, session: ort.InferenceSession, tmp_path: Path
) -> None:
    path = write_scene_video(tmp_path / "scene.mp4", scene, start_s=CLIP[0], end_s=CLIP[1])
    buffer = LetterboxBuffer(640, 640)
    first = round(CLIP[0] * scene.fps)
    decoded = 0
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            lb = letterbox_frame(frame, buffer)  # what the decoder does with each frame
            (out,) = session.run(None, {"images": model_input(buffer.hwc)})
            t_s = (first + i) / scene.fps
            assert_actors_found(scene, t_s, out[0], lb)
            # Through the inferencer's own decoding and class-aware NMS: the walkers stay apart.
            (raw,) = Decoder(HeadFormat.YOLOV8).decode([out], 1)
            assert len(raw.scores) == sum(scene.box_at(k, t_s) is not None for k in range(5))
            decoded += 1
    assert decoded == round((CLIP[1] - CLIP[0]) * scene.fps)


def test_scene_rules_document_when_compared_with_example_file_then_equal(scene: Scene) -> None:
    example = Path(__file__).parents[3] / "examples" / "scene-rules.yaml"
    assert yaml.safe_load(example.read_text()) == scene_rules_document(scene)
    rules = {r["type"]: r for r in scene_rules_document(scene, dwell_s=3.5)["rules"]}
    assert rules["dwell"]["seconds"] == 3.5
    assert rules["line_crossing"]["line"] == [[800, 0], [800, 720]]


def test_still_scene_when_scored_then_one_in_one_out_a_long_dwell_and_a_light_switched_on() -> None:
    scene = still_scene()
    assert scene.expected_crossings() == {"person:OUT": 1, "person:IN": 1}
    enter, leave = scene.dwell_truth(0)
    assert enter < 2.0 and leave > 26.0
    assert scene.background_at(13.9) == BACKGROUND_LEVEL and scene.background_at(14.0) == LIT_LEVEL
    assert not scene.occupancy_truth()
    # The leaver's last box is at the right edge; the arriver's first, a second later, 192 px up.
    last, first = scene.box_at(1, 37.0), scene.box_at(2, 38.0)
    assert last is not None and first is not None
    assert last[2] > 1260 and first[0] == last[0] and last[1] - first[1] == 192
    assert scene.box_at(1, 37.5) is None and scene.box_at(2, 37.5) is None
    moving = sum(
        1
        for i in range(round(scene.duration_s * 10))
        if any(
            scene.box_at(k, i / 10) != scene.box_at(k, (i + 1) / 10)
            for k in range(len(scene.actors))
        )
    )
    assert moving / (scene.duration_s * 10) < 0.25
    for actor in scene.actors:  # seen apart from the ground by colour and by luma, lit or not
        luma = 0.299 * actor.colour[0] + 0.587 * actor.colour[1] + 0.114 * actor.colour[2]
        for ground in (BACKGROUND_LEVEL, LIT_LEVEL):
            assert abs(luma - ground) >= 40
            assert max(abs(c - ground) for c in actor.colour) / 255 > COLOUR_TOLERANCE + 0.05
