from pathlib import Path

import numpy as np

from framebus_inferencer.engine import Engine
from framebus_inferencer.pipeline.staging import StagingPool
from framebus_inferencer.providers import EngineOptions


def _frames(n: int) -> list[np.ndarray]:
    out = []
    for i in range(n):
        frame = np.full((640, 640, 3), 24, np.uint8)
        frame[100 + 10 * i : 200 + 10 * i, 300:380] = 235
        out.append(frame.reshape(-1))  # flat, as the receive thread holds them
    return out


def test_staging_pool_when_frames_staged_then_same_detections_as_copying_path(
    square_model: Path,
) -> None:
    engine = Engine(square_model, EngineOptions(max_batch=4))
    engine.warm_up()
    pool = StagingPool(engine)
    frames = _frames(3)
    slot = pool.stage(frames)
    assert slot is not None and slot.bucket == 4
    staged = engine.decoder().decode(engine.infer_slot(slot, 3), 3)
    copied = engine.decoder().decode(engine.infer(frames), 3)
    for a, b in zip(staged, copied, strict=True):
        np.testing.assert_allclose(a.boxes, b.boxes)
    assert [d.boxes.tolist() for d in staged][2] == [[300.0, 120.0, 380.0, 220.0]]


def test_staging_pool_when_all_slots_of_a_bucket_taken_then_none_until_given_back(
    square_model: Path,
) -> None:
    engine = Engine(square_model, EngineOptions(max_batch=2))
    pool = StagingPool(engine, per_bucket=2)
    frames = _frames(2)
    first, second = pool.stage(frames), pool.stage(frames)
    assert first is not None and second is not None
    assert pool.stage(frames) is None  # the infer thread copies this batch itself
    pool.give_back(first)
    assert pool.stage(frames) is first


def test_staging_pool_when_warmed_up_then_every_bucket_has_its_slots_with_outputs_bound(
    square_model: Path,
) -> None:
    engine = Engine(square_model, EngineOptions(max_batch=4))
    engine.warm_up()
    pool = StagingPool(engine, per_bucket=2)
    held = pool.warm_up()
    slots = [pool.stage(_frames(n)) for n in (1, 1, 2, 2, 3, 4)]
    assert [s.bucket for s in slots if s is not None] == [1, 1, 2, 2, 4, 4]
    assert all(s is not None and s.outputs is not None for s in slots)
    assert held == sum(s.nbytes for s in slots if s is not None)
    assert pool.stage(_frames(1)) is None  # nothing is made mid-stream once warmed up


def test_input_slot_when_bucket_ran_before_then_outputs_bound_at_once_and_detections_right(
    square_model: Path,
) -> None:
    engine = Engine(square_model, EngineOptions(max_batch=4))
    engine.warm_up()
    slot = engine.input_slot(3)
    assert slot.outputs is not None
    slot.fill(_frames(3))
    out = engine.infer_slot(slot, 3)
    assert out[0] is slot.outputs[0]  # written in place, not copied out
    boxes = engine.decoder().decode(out, 3)[2].boxes.tolist()
    assert boxes == [[300.0, 120.0, 380.0, 220.0]]


def test_input_slot_when_filled_then_each_frame_split_into_its_planes_and_padding_zeroed(
    square_model: Path,
) -> None:
    engine = Engine(square_model, EngineOptions(max_batch=4))
    slot = engine.input_slot(3)
    slot.staging[:] = 7  # a reused slot: the padding row must be zeroed again
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (640, 640, 3), np.uint8) for _ in range(3)]
    slot.fill([frames[0], frames[1].reshape(-1), frames[2].tobytes()])
    assert slot.staging.shape == (4, 3, 640, 640)
    np.testing.assert_array_equal(slot.staging[:3], np.stack(frames).transpose(0, 3, 1, 2))
    assert not slot.staging[3].any()
