import numpy as np
import numpy.typing as npt
import pytest

from framebus.letterbox import Letterbox
from framebus_decoder.motion import (
    MotionConfig,
    MotionGate,
    MotionReason,
    grid_factor,
    mask_grid,
    shrink,
)

U8 = npt.NDArray[np.uint8]
FPS = 5.0
GROUND = 60
OBJECT = 200


def scene(box: tuple[int, int, int, int] | None = None, size: tuple[int, int] = (360, 640)) -> U8:
    """A flat dark luma picture with an optional bright box (x1, y1, x2, y2)."""
    img = np.full(size, GROUND, np.uint8)
    if box is not None:
        x1, y1, x2, y2 = box
        img[y1:y2, x1:x2] = OBJECT
    return img


def run(gate: MotionGate, pictures: list[U8], start: int = 0, scale: float = 1.0) -> list[str]:
    """The reasons for `pictures` sampled at FPS from frame number `start`."""
    return [gate.check(p, scale, (start + i) / FPS).reason.value for i, p in enumerate(pictures)]


def square(i: int) -> tuple[int, int, int, int]:
    x = 20 + 30 * i
    return (x, 100, x + 60, 160)


def test_gate_when_scene_static_then_still_after_first_frame() -> None:
    reasons = run(MotionGate(MotionConfig()), [scene()] * 10)
    assert reasons == ["first"] + ["still"] * 9


def test_gate_when_square_moves_then_every_frame_is_motion() -> None:
    gate = MotionGate(MotionConfig())
    reasons = run(gate, [scene()] + [scene(square(i)) for i in range(10)])
    assert reasons == ["first"] + ["motion"] * 10


def test_gate_when_object_stops_then_motion_end_then_still_with_a_refresh_every_period() -> None:
    gate = MotionGate(MotionConfig(still_refresh_s=2.0))
    moving = [scene()] + [scene(square(i)) for i in range(5)]
    reasons = run(gate, moving)
    parked = [scene(square(4))] * 60
    after = run(gate, parked, start=len(moving))
    # Compared with the last full frame, which shows it parked: no trail, no fading.
    assert after[0] == "motion_end"
    rest = after[1:]
    refreshes = [i for i, r in enumerate(rest) if r == "refresh"]
    assert set(rest) == {"still", "refresh"}
    # Every 2 s at 5 fps: the 10th frame after the last full one.
    assert refreshes[0] == 9
    assert np.diff(refreshes).tolist() == [10] * (len(refreshes) - 1)
    assert reasons == ["first"] + ["motion"] * 5


def test_gate_when_whole_picture_brightens_then_lighting_refresh_not_motion_then_still() -> None:
    gate = MotionGate(MotionConfig())
    run(gate, [scene()] * 3)
    brighter = scene() + np.uint8(40)
    decision = gate.check(brighter, 1.0, 3 / FPS)
    assert decision.reason is MotionReason.LIGHTING
    assert not decision.still and decision.changed_fraction > 0.5
    assert run(gate, [brighter] * 5, start=4) == ["still"] * 5


def test_gate_when_motion_inside_mask_then_still() -> None:
    # A 1280x720 camera letterboxed into 640x640: the picture is 640x360 at scale 0.5.
    lb = Letterbox.fit(1280, 720, 640, 640)
    mask = (((0.0, 0.0), (640.0, 0.0), (640.0, 400.0), (0.0, 400.0)),)  # top-left, original px
    gate = MotionGate(MotionConfig(mask=mask))
    inside = [scene(square(i % 5)) for i in range(8)]  # x 10..330, y 100..160 in the picture
    assert run(gate, [scene(), *inside], scale=lb.scale) == ["first"] + ["still"] * 8
    unmasked = MotionGate(MotionConfig())
    assert run(unmasked, [scene(), *inside], scale=lb.scale)[1:] == ["motion"] * 8


def test_gate_when_change_smaller_than_min_area_then_still() -> None:
    gate = MotionGate(MotionConfig(min_area=0.01))
    # A 24x24 square is ~16 grid pixels of 6360: 0.25 % < 1 %.
    tiny = [scene((100 + 30 * i, 100, 124 + 30 * i, 124)) for i in range(6)]
    reasons = run(gate, [scene(), *tiny])
    assert reasons == ["first"] + ["still"] * 6


def test_gate_when_sensor_noise_then_still() -> None:
    rng = np.random.default_rng(7)
    noisy = [
        np.clip(scene() + rng.normal(0, 3, (360, 640)), 0, 255).astype(np.uint8) for _ in range(10)
    ]
    gate = MotionGate(MotionConfig())
    assert run(gate, noisy) == ["first"] + ["still"] * 9


def test_gate_when_reset_then_next_frame_is_first() -> None:
    gate = MotionGate(MotionConfig())
    run(gate, [scene()] * 3)
    gate.reset()
    assert gate.check(scene(), 1.0, 1.0).reason is MotionReason.FIRST


def test_gate_when_rgb_picture_then_same_decisions_as_its_luma() -> None:
    rgb = [np.repeat(scene(square(i))[:, :, None], 3, axis=2) for i in range(4)]
    reasons = run(MotionGate(MotionConfig()), [np.repeat(scene()[:, :, None], 3, axis=2), *rgb])
    assert reasons == ["first"] + ["motion"] * 4


def test_shrink_when_picture_640_wide_then_whole_factor_grid_about_100_wide() -> None:
    assert grid_factor(640) == 6
    assert shrink(scene()).shape == (60, 106)
    assert shrink(np.zeros((360, 640, 3), np.uint8)).shape == (60, 106)


@pytest.mark.parametrize("scale", [0.5, 1 / 3])
def test_mask_grid_when_polygon_in_original_pixels_then_scaled_to_grid(scale: float) -> None:
    square_px = 600  # a 600 px square in original pixels
    poly = ((0.0, 0.0), (square_px, 0.0), (square_px, square_px), (0.0, square_px))
    grid = mask_grid((poly,), scale, 6, (60, 106))
    side = round(square_px * scale / 6)
    assert abs(int(grid.sum()) - side * side) <= 2 * side + 1


def test_gate_when_object_creeps_below_min_area_a_frame_then_motion_once_it_adds_up() -> None:
    # 2 px a frame changes too little each time; against the last full frame the change grows.
    gate = MotionGate(MotionConfig(min_area=0.01))
    pictures = [scene((100 + 2 * i, 100, 160 + 2 * i, 160)) for i in range(40)]
    reasons = run(gate, pictures)
    assert reasons[0] == "first" and "motion" in reasons
    assert reasons[1] == "still"  # one step alone is below min_area


def test_gate_when_object_leaves_after_standing_then_one_motion_frame_and_no_ghost() -> None:
    gate = MotionGate(MotionConfig(still_refresh_s=100.0))
    run(gate, [scene(square(2))] * 20)
    reasons = run(gate, [scene()] * 10, start=20)
    assert reasons == ["motion", "motion_end"] + ["still"] * 8
