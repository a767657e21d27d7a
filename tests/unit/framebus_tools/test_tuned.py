from dataclasses import asdict

import pytest

from framebus.errors import ConfigError
from framebus_tools.perf.knee import BatchPoint
from framebus_tools.perf.tuned import tuned_load


def tune_doc(points: list[BatchPoint], budget_ms: float = 1000.0) -> dict[str, object]:
    """The parts of a tune.json a tuned load test reads (settings are written as strings)."""
    return {
        "points": [asdict(p) for p in points],
        "settings": {
            "latency_budget_ms": str(budget_ms),
            "memory_budget_mb": "None",
            "knee_gain": "0.1",
            "threads": "1",
            "model_path": "/models/yolov8n.onnx",
        },
    }


CPU_FLAT = [
    BatchPoint(1, 5.4, 185.0, 209.0, 300.0),
    BatchPoint(2, 5.5, 365.0, 400.0, 350.0),
    BatchPoint(4, 5.5, 730.0, 780.0, 450.0),
]


def test_tuned_load_when_cpu_curve_flat_then_batch_one_at_80_percent_and_goal_from_its_p99() -> (
    None
):
    load = tuned_load(tune_doc(CPU_FLAT), cameras=4, load_fraction=0.8)
    assert load.capacity_fps == pytest.approx(5.4)
    assert load.fps_per_camera == pytest.approx(0.8 * 5.4 / 4, abs=1e-3)
    assert load.max_batch == 1
    # 40 % of 1000 ms, capped by the time 4 x 1.08 fps takes to bring one frame: 231.5 ms.
    assert load.max_wait_ms == pytest.approx(231.5, abs=0.1)
    assert load.goal_p99_ms == pytest.approx(231.5 + 2 * 209.0, abs=0.1)
    assert load.max_frame_age_ms == 1000 - 209
    assert (load.threads, str(load.model_path)) == (1, "/models/yolov8n.onnx")


def test_tuned_load_when_gpu_like_curve_then_batch_and_goal_of_the_recommended_point() -> None:
    points = [
        BatchPoint(1, 120.0, 8.3, 10.0, 900.0),
        BatchPoint(2, 200.0, 10.0, 12.0, 950.0),
        BatchPoint(4, 280.0, 14.3, 17.0, 1000.0),
        BatchPoint(8, 420.0, 19.0, 23.0, 1100.0),
        BatchPoint(16, 450.0, 35.6, 43.0, 1300.0),
    ]
    load = tuned_load(tune_doc(points, budget_ms=80.0), cameras=16, load_fraction=0.8)
    assert load.max_batch == 8
    assert load.capacity_fps == pytest.approx(420.0)
    assert load.goal_p99_ms == pytest.approx(load.max_wait_ms + 46.0)


@pytest.mark.parametrize(
    ("doc", "cameras", "fraction", "match"),
    [
        ({"points": []}, 4, 0.8, "tune.json"),
        (tune_doc(CPU_FLAT), 0, 0.8, "cameras"),
        (tune_doc(CPU_FLAT), 4, 0.0, "load_fraction"),
    ],
)
def test_tuned_load_when_input_bad_then_config_error(
    doc: dict[str, object], cameras: int, fraction: float, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        tuned_load(doc, cameras, fraction)
