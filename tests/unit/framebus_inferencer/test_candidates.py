"""Candidate selection in the graph: the same boxes as the host path, or the host path itself.

Every model here runs twice (or three times) through the real engine on ONNX Runtime's CPU
provider: with `candidate_selection=host` (today's path: the raw head decoded with numpy) and with
the graph's top-K (and its NMS), and the detections must be equal to the last bit.
"""

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from framebus.errors import ConfigError, ModelError
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_inferencer.candidates import OUTPUT, append_candidate_selection
from framebus_inferencer.engine import Engine
from framebus_inferencer.postprocess import CandidateRows, Decoder, RawDetections
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.service import describe_engine
from framebus_inferencer.settings import (
    CandidateSelection,
    HeadFormat,
    InferencerSettings,
    Provider,
)
from framebus_inferencer.stats import InferencerStats
from framebus_inferencer.telemetry import StatsCollector
from framebus_tools.onnxedit import to_float16, with_static_batch
from framebus_tools.scene_model import color_blob_model
from framebus_tools.scenes import default_scene
from framebus_tools.synthetic import write_bright_square_model
from testkit.models import (
    end2end_model,
    frame_dependent_model,
    near_free_model,
    strided_head_model,
    with_dynamic_output_dims,
    yolov5_model,
    yolov8_model,
)

HOST, TOPK, TOPK_NMS = CandidateSelection.HOST, CandidateSelection.TOPK, CandidateSelection.TOPK_NMS
NAMES = ("a", "b", "c")
# What TensorRT's parser and the CUDA provider run; NonZero (data-dependent shapes) is not here.
# No ArgMax: TensorRT runs it as a TopK of 1, whose ties are its own (Equal + ReduceMin instead).
DEVICE_OPS = {
    "Slice", "Cast", "ReduceMax", "Less", "Where", "TopK", "Reshape", "Expand",
    "GatherElements", "Equal", "ReduceMin", "Concat", "Transpose", "Identity",
}  # fmt: skip
NMS_OPS = {
    "Mul", "Add", "Sub", "Abs", "NonMaxSuppression", "Gather", "Shape",
    "ConstantOfShape", "ScatterND",
}  # fmt: skip


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def greys(n: int, size: int = 32) -> list[npt.NDArray[np.uint8]]:
    """`n` frames of different grey levels: a frame-dependent model gives each its own head."""
    return [np.full((size, size, 3), 40 * i, np.uint8) for i in range(n)]


def engine(
    path: Path, how: CandidateSelection, head: HeadFormat = HeadFormat.AUTO, **options: Any
) -> Engine:
    opts = EngineOptions(providers=(Provider.CPU,), max_batch=4, candidate_selection=how)
    eng = Engine(path, replace(opts, **options), head=head)
    eng.warm_up()
    return eng


def detections(
    path: Path, how: CandidateSelection, frames: list, max_detections: int = 300, **opts: Any
) -> list[RawDetections]:
    eng = engine(path, how, **opts)
    assert (eng.info.candidates is not None) is (how is not HOST)
    return eng.decoder(max_detections).decode(eng.infer(frames), len(frames))


def assert_same(want: list[RawDetections], got: list[RawDetections]) -> None:
    assert len(want) == len(got)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a.boxes, b.boxes)
        np.testing.assert_array_equal(a.scores, b.scores)
        np.testing.assert_array_equal(a.class_ids, b.class_ids)
        assert a.boxes.dtype == b.boxes.dtype and a.class_ids.dtype == b.class_ids.dtype


def assert_device_equals_host(
    path: Path, frames: list, expect_none: bool = False, **opts: Any
) -> list[RawDetections]:
    want = detections(path, HOST, frames, **opts)
    assert (sum(len(d.boxes) for d in want) == 0) is expect_none  # a test that can fail
    for how in (TOPK, TOPK_NMS):
        assert_same(want, detections(path, how, frames, **opts))
    return want


def v8_rows(rng: np.random.Generator, anchors: int = 250) -> npt.NDArray[np.float32]:
    """A YOLOv8 head [4 + 3, anchors] of clustered boxes (NMS has work) and tied scores.

    Fewer than 300 anchors: every candidate fits the graph's K, so the boxes must be equal.
    """
    rows = np.empty((4 + 3, anchors), np.float32)
    rows[0:2] = rng.integers(4, 28, (2, anchors))  # centres on a 32 x 32 input: many overlaps
    rows[2:4] = rng.integers(2, 12, (2, anchors))
    rows[4:] = rng.choice(np.float32([0.1, 0.3, 0.5, 0.7, 0.9]), (3, anchors))  # many ties
    rows[4:, :40] = 0.5  # anchors tied across all classes: the first class wins on both paths
    return rows


# --- equal to the host path --------------------------------------------------------------------


def test_candidates_when_yolov8_head_with_ties_and_overlaps_then_boxes_equal_the_host_path(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)
    base, step = v8_rows(rng), np.zeros((7, 250), np.float32)
    step[4:] = rng.choice(np.float32([-0.3, 0, 0.3]), (3, 250))  # each grey its own scores
    path = save(frame_dependent_model(base, step, names=NAMES), tmp_path / "v8.onnx")
    want = assert_device_equals_host(path, greys(4))
    assert len({len(d.boxes) for d in want}) > 1  # the frames really differ


def test_candidates_when_yolov5_objectness_gates_then_boxes_equal_the_host_path(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(1)
    rows = np.empty((280, 5 + 3), np.float32)
    rows[:, 0:2] = rng.integers(4, 28, (280, 2))
    rows[:, 2:4] = rng.integers(2, 12, (280, 2))
    rows[:, 4] = rng.choice(np.float32([0.2, 0.25, 0.5, 0.9, 1.0]), 280)
    rows[:, 5:] = rng.choice(np.float32([0.2, 0.5, 1.0]), (280, 3))
    rows[:10, 4], rows[:10, 5] = 0.2, 2.0  # 0.4 >= 0.25 but objectness 0.2 < 0.25: dropped
    path = save(yolov5_model(rows, names=NAMES), tmp_path / "v5.onnx")
    want = assert_device_equals_host(path, greys(3))
    assert not any(np.any(d.scores == np.float32(0.4)) for d in want)


def test_candidates_when_float16_heads_and_a_threshold_float16_rounds_then_equal(
    tmp_path: Path,
) -> None:
    # 0.2 is 0.19995... in float16: numpy compares a float16 head with it in float16, so an
    # objectness of exactly float16(0.2) passes YOLOv5's filter (and, times a class score of 2,
    # scores 0.4); the graph's bound must be that float16 value, not float32(0.2).
    rng = np.random.default_rng(2)
    rows = v8_rows(rng)
    rows[4:, 40:80] = np.float16(0.2)
    rows[4:, 80:90] = np.nextafter(np.float16(0.2), np.float16(0))
    v5 = np.ascontiguousarray(rows[[0, 1, 2, 3, 4, 4, 5, 6]].T)  # objectness: class 0's row
    v5[40:50, 5] = 2.0
    for name, model in (
        ("v8", yolov8_model(rows, names=NAMES)),
        ("v5", yolov5_model(v5, names=NAMES)),
    ):
        path = save(to_float16(model), tmp_path / f"{name}16.onnx")
        for conf in (0.25, 0.2):
            want = assert_device_equals_host(path, greys(3), confidence_threshold=conf)
            if name == "v5" and conf == 0.2:
                assert np.sum(want[0].scores == np.float32(np.float16(0.2)) * 2) > 0


def test_decoder_when_candidate_rows_tie_out_of_anchor_order_then_anchor_order_decides() -> None:
    # ONNX TopK puts the lower index first among equal scores; a provider that does not must
    # not change the boxes: the host orders the rows by anchor, as the raw head's filter finds them.
    rows = np.full((1, 4, 7), -np.inf, np.float32)
    rows[0, :3] = [[10, 10, 4, 4, 0.5, 0, 7], [11, 10, 4, 4, 0.5, 0, 3], [30, 30, 4, 4, 0.9, 1, 9]]
    layout = CandidateRows(4, 10, 0.25)
    (det,) = Decoder(HeadFormat.YOLOV8, candidates=layout).decode([rows], 1)
    assert det.boxes.tolist() == [[28, 28, 32, 32], [9, 8, 13, 12]]  # anchor 3 kept, not 7
    assert det.class_ids.tolist() == [1, 0]


def test_candidates_when_static_batch_models_then_each_call_selects_and_boxes_equal(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(3)
    base, step = v8_rows(rng), np.zeros((7, 250), np.float32)
    step[:2] = 8  # boxes move with the grey level
    for batch in (1, 4):
        model = with_static_batch(frame_dependent_model(base, step, names=NAMES), batch)
        path = save(model, tmp_path / f"static{batch}.onnx")
        assert_device_equals_host(path, greys(7), max_batch=8)


def test_candidates_when_bright_square_float16_and_static_then_the_square_on_both_paths(
    tmp_path: Path,
) -> None:
    frames = []
    for i in range(3):
        frame = np.full((64, 64, 3), 24, np.uint8)
        frame[i : i + 10, 2 * i : 2 * i + 20] = 235
        frames.append(frame)
    for kind in ({}, {"float16": True}, {"static_batch": 1}):
        path = write_bright_square_model(tmp_path / "sq.onnx", 64, **kind)  # type: ignore[arg-type]
        want = assert_device_equals_host(path, frames)
        assert [d.boxes.tolist() for d in want] == [
            [[2 * i, i, 2 * i + 20, i + 10]] for i in range(3)
        ]


def test_candidates_when_generated_scene_frames_then_boxes_equal_the_host_path(
    tmp_path: Path,
) -> None:
    scene = default_scene()
    path = save(color_blob_model(scene), tmp_path / "scene.onnx")
    frames = []
    for t_s in (0.5, 2.0, 3.6, 5.0):
        buffer = LetterboxBuffer(640, 640)
        buffer.fill_rgb(scene.render(t_s))
        frames.append(buffer.tensor.copy())
    want = assert_device_equals_host(path, frames)
    assert [len(d.boxes) for d in want] == [
        sum(scene.visible_box_at(k, t) is not None for k in range(len(scene.actors)))
        for t in (0.5, 2.0, 3.6, 5.0)
    ]


# --- fewer than K, none, more than K -----------------------------------------------------------


def test_candidates_when_fewer_anchors_than_k_then_k_is_the_anchor_count(tmp_path: Path) -> None:
    rows = v8_rows(np.random.default_rng(4), anchors=50)
    path = save(yolov8_model(rows, names=NAMES), tmp_path / "few.onnx")
    eng = engine(path, TOPK)
    assert eng.info.candidates == CandidateRows(50, 50, 0.25)
    assert eng.infer(greys(3))[0].shape == (4, 50, 7)
    assert_device_equals_host(path, greys(3))


def test_candidates_when_fewer_than_k_above_the_threshold_then_rest_of_rows_masked(
    tmp_path: Path,
) -> None:
    rows = v8_rows(np.random.default_rng(5))
    rows[4:, 5:] = 0.1  # 5 anchors of 400 reach 0.25
    path = save(yolov8_model(rows, names=NAMES), tmp_path / "m.onnx")
    eng = engine(path, TOPK, max_candidates=32)
    out = eng.infer(greys(1))[0][0]  # [32, 7]
    assert out.shape == (32, 7) and np.isneginf(out[5:, 4]).all()
    assert sorted(out[:5, 6].tolist()) == [0, 1, 2, 3, 4]  # the anchor indices
    assert not eng.decoder().decode([out[None]], 1)[0].saturated
    assert_device_equals_host(path, greys(2), max_candidates=32)


def test_candidates_when_no_anchor_reaches_the_threshold_then_no_boxes_on_either_path(
    tmp_path: Path,
) -> None:
    path = save(near_free_model(64, classes=3), tmp_path / "zero.onnx")
    for how in (HOST, TOPK, TOPK_NMS):
        dets = detections(path, how, greys(3, 64))
        assert all(len(d.boxes) == 0 and not d.saturated for d in dets)


def test_candidates_when_more_than_k_above_the_threshold_then_the_k_best_and_saturated(
    tmp_path: Path,
) -> None:
    rows = np.zeros((4 + 1, 7), np.float32)
    rows[0] = [3, 8, 13, 18, 23, 28, 30]  # seven boxes side by side: NMS keeps them all
    rows[1], rows[2:4] = 16, 4
    rows[4] = [0.3, 0.9, 0.5, 0.8, 0.4, 0.7, 0.1]
    path = save(yolov8_model(rows, names=["a"]), tmp_path / "many.onnx")
    (host,) = detections(path, HOST, greys(1))
    (top,) = detections(path, TOPK, greys(1), max_candidates=3, max_detections=3)
    assert host.scores.tolist() == pytest.approx([0.9, 0.8, 0.7, 0.5, 0.4, 0.3])
    np.testing.assert_array_equal(top.boxes, host.boxes[:3])
    assert top.saturated and not host.saturated


def test_metrics_when_frames_filled_every_candidate_row_then_counted() -> None:
    stats = InferencerStats()
    stats.candidates_saturated(0)
    stats.candidates_saturated(2)
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert "framebus_inferencer_candidates_saturated_frames_total 2.0" in text


# --- what the graph holds, and the fallback ------------------------------------------------------


def appended_ops(model: onnx.ModelProto, how: CandidateSelection) -> set[str]:
    sel = append_candidate_selection(model, HeadFormat.YOLOV8, how, 0.25, 300, 0.45)
    assert sel.rows is not None, sel.reason
    assert [o.name for o in sel.model.graph.output] == [OUTPUT]
    before = {n.name for n in model.graph.node}
    return {n.op_type for n in sel.model.graph.node if n.name not in before}


def test_candidates_when_appended_then_only_device_ops_with_a_constant_k() -> None:
    model = near_free_model(640, classes=3)  # 8400 anchors
    assert appended_ops(model, TOPK) <= DEVICE_OPS
    assert appended_ops(model, TOPK_NMS) <= DEVICE_OPS | NMS_OPS
    assert not {"NonZero", "ArgMax"} & appended_ops(model, TOPK_NMS)
    sel = append_candidate_selection(model, HeadFormat.YOLOV8, TOPK, 0.25, 300, 0.45)
    (top,) = (n for n in sel.model.graph.node if n.op_type == "TopK")
    k = next(i for i in sel.model.graph.initializer if i.name == top.input[1])
    assert onnx.numpy_helper.to_array(k).tolist() == [300]


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_candidates_when_model_opset_differs_then_ops_of_that_opset_and_equal(
    tmp_path: Path, opset: int
) -> None:
    # ReduceMax takes its axes as an input from opset 18, as an attribute before.
    rng = np.random.default_rng(9)
    base, step = v8_rows(rng), np.zeros((7, 250), np.float32)
    step[4:] = rng.choice(np.float32([-0.3, 0, 0.3]), (3, 250))
    model = frame_dependent_model(base, step, names=NAMES, opset=opset)
    path = save(model, tmp_path / f"o{opset}.onnx")
    assert engine(path, TOPK).info.candidates is not None
    assert_device_equals_host(path, greys(3))


def test_candidates_when_opset_before_11_then_host_path_naming_it(tmp_path: Path) -> None:
    model = frame_dependent_model(v8_rows(np.random.default_rng(10)), np.zeros((7, 250)), opset=10)
    sel = append_candidate_selection(model, HeadFormat.YOLOV8, TOPK, 0.25, 300, 0.45)
    assert sel.rows is None and sel.model is model
    assert sel.reason == "its opset 10 is older than 11 (GatherElements)"


def colour_frames(height: int, width: int) -> list[npt.NDArray[np.uint8]]:
    """Flat colour blocks on grey (scores tied across cells and classes), and a noisy frame."""
    frames = []
    for i in range(3):
        frame = np.full((height, width, 3), 40, np.uint8)
        frame[8 * i : 8 * i + 24, 4 : 4 + 16 * (i + 1)] = (230, 40, 40)
        frame[height // 2 :, width // 2 - 8 * i :] = (40, 200, 200)  # green and blue tie
        frames.append(frame)
    frames.append(np.random.default_rng(11).integers(0, 256, (height, width, 3), np.uint8))
    return frames


@pytest.mark.parametrize(("size", "anchors"), [(None, 64), ((96, 128), 192)])
def test_candidates_when_anchor_count_declared_dynamic_then_inferred_at_the_pinned_size(
    tmp_path: Path, size: tuple[int, int] | None, anchors: int
) -> None:
    # Ultralytics' dynamic=True export: input ['batch', 3, 'height', 'width'], output0
    # ['batch', 4 + C, 'anchors']. The engine pins height and width (imgsz 64, or the configured
    # size), which fixes the anchor count: the graph selects, K = min(300, anchors).
    path = save(strided_head_model(64), tmp_path / "dynamic.onnx")
    opts: dict[str, Any] = {}
    if size is not None:
        opts = {"input_height": size[0], "input_width": size[1]}
    eng = engine(path, TOPK, **opts)
    assert eng.info.candidates == CandidateRows(anchors, anchors, 0.25)
    height, width = size or (64, 64)
    want = assert_device_equals_host(path, colour_frames(height, width), **opts)
    assert len({len(d.boxes) for d in want}) > 1


def test_candidates_when_head_cannot_be_rewritten_then_host_path_one_warning_and_metric(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows = v8_rows(np.random.default_rng(6))
    path = save(with_dynamic_output_dims(yolov8_model(rows, names=NAMES)), tmp_path / "dyn.onnx")
    with caplog.at_level(logging.INFO, logger="framebus_inferencer.engine"):
        eng = engine(path, TOPK, HeadFormat.YOLOV8)
    said = [r for r in caplog.records if "candidates" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert (
        said[0]
        .getMessage()
        .startswith(
            "candidates of the yolov8 head are selected on the host, not in the graph as "
            "FRAMEBUS_CANDIDATE_SELECTION=topk asks"
        )
    )
    assert "leaves the class or anchor count unknown" in said[0].getMessage()
    assert eng.info.candidates is None and eng.candidate_fallback
    text = metrics(eng)
    assert 'framebus_inferencer_candidate_selection{where="host"} 1.0' in text
    assert "framebus_inferencer_candidate_selection_fallback 1.0" in text
    host = engine(path, HOST, HeadFormat.YOLOV8)
    assert_same(
        host.decoder().decode(host.infer(greys(2)), 2), eng.decoder().decode(eng.infer(greys(2)), 2)
    )


def metrics(eng: Engine) -> str:
    stats = InferencerStats()
    describe_engine(stats, eng)
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def test_candidates_when_selected_in_the_graph_then_metric_says_device_and_no_fallback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = save(yolov8_model(v8_rows(np.random.default_rng(7)), names=NAMES), tmp_path / "m.onnx")
    with caplog.at_level(logging.INFO, logger="framebus_inferencer.engine"):
        eng = engine(path, TOPK)
    assert not [r for r in caplog.records if "candidates" in r.getMessage()]
    assert 'framebus_inferencer_candidate_selection{where="device"} 1.0' in metrics(eng)
    assert "framebus_inferencer_candidate_selection_fallback 0.0" in metrics(eng)


def test_candidates_when_auto_on_the_cpu_provider_then_host_path_said_once_not_a_fallback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = save(yolov8_model(v8_rows(np.random.default_rng(8)), names=NAMES), tmp_path / "m.onnx")
    with caplog.at_level(logging.INFO, logger="framebus_inferencer.engine"):
        eng = engine(path, CandidateSelection.AUTO)
    said = [r for r in caplog.records if "candidates" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert "auto and no GPU provider runs the graph" in said[0].getMessage()
    assert eng.info.candidates is None and not eng.candidate_fallback


def test_candidates_when_end2end_head_then_no_surgery_and_selected_on_the_device(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dets = np.array([[1, 2, 3, 4, 0.9, 1]], np.float32)
    path = save(end2end_model(dets, names=NAMES), tmp_path / "e2e.onnx")
    with caplog.at_level(logging.INFO, logger="framebus_inferencer.engine"):
        eng = engine(path, TOPK)
    assert eng.info.candidates is None and not eng.candidate_fallback
    assert not [r for r in caplog.records if "candidates" in r.getMessage()]
    assert 'framebus_inferencer_candidate_selection{where="device"} 1.0' in metrics(eng)


def test_candidates_when_a_wrong_head_hides_behind_dynamic_dims_then_warm_up_still_refuses(
    tmp_path: Path,
) -> None:
    one = np.array([[16], [16], [8], [8], [0.1], [0.9]], np.float32)
    path = save(with_dynamic_output_dims(yolov8_model(one)), tmp_path / "dyn.onnx")
    eng = Engine(path, EngineOptions(max_batch=2, candidate_selection=TOPK), head=HeadFormat.YOLOV5)
    assert eng.info.candidates is None  # dims unknown: the host path, and its check
    with pytest.raises(ModelError, match=r"\[1, 6, 1\] cannot be decoded as the yolov5 head"):
        eng.warm_up()


def test_decoder_when_threshold_below_the_graphs_or_nms_iou_differs_then_refused() -> None:
    rows = CandidateRows(300, 8400, 0.25, 0.45)
    with pytest.raises(ModelError, match="keeps candidates from a score of 0.25"):
        Decoder(HeadFormat.YOLOV8, 0.2, 0.45, candidates=rows)
    with pytest.raises(ModelError, match="runs NMS at IoU 0.45, not 0.5"):
        Decoder(HeadFormat.YOLOV8, 0.25, 0.5, candidates=rows)
    with pytest.raises(ModelError, match=r"returns one \[N, 300, 7\] output"):
        Decoder(HeadFormat.YOLOV8, 0.3, 0.45, candidates=rows).check(
            [np.zeros((1, 84, 8400), np.float32)], 1
        )


def test_settings_when_max_candidates_below_max_detections_then_refused_unless_host() -> None:
    with pytest.raises(ConfigError, match="MAX_CANDIDATES .*between max_detections and 30000"):
        InferencerSettings(max_candidates=100)
    assert InferencerSettings(max_candidates=100, max_detections=100).max_candidates == 100
    assert InferencerSettings(max_candidates=1, candidate_selection=HOST).max_candidates == 1
