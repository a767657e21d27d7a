"""From a `framebus tune` result to a load test that checks it: the load, the settings, the goal.

Pure logic over the parsed `tune.json`: the load test runs the same model with the same engine
threads at a fraction of the capacity tune measured, with the `max_batch`, `max_wait_ms` and
`max_frame_age_ms` tune recommends for that load, and its p99 end-to-end latency is held to `max_wait_ms` plus twice the
p99 batch latency tune measured at that batch size.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from framebus.errors import ConfigError
from framebus_tools.perf.knee import BatchPoint, Budget, recommend


@dataclass(frozen=True)
class TunedLoad:
    """What a tuned load test runs and the latency it must stay under."""

    capacity_fps: float  # what tune measured at its recommended batch (no target load)
    fps_per_camera: float
    max_batch: int
    max_wait_ms: float
    max_frame_age_ms: float
    batch_p99_ms: float
    threads: int
    model_path: Path | None

    @property
    def goal_p99_ms(self) -> float:
        """At most one batch being formed and two in flight: wait + 2 x batch p99."""
        return self.max_wait_ms + 2 * self.batch_p99_ms


def _optional_float(text: str) -> float | None:
    return None if text in ("", "None") else float(text)


def tuned_load(doc: dict[str, Any], cameras: int, load_fraction: float) -> TunedLoad:
    """The load test `cameras` cameras at `load_fraction` of tune's capacity should run."""
    if cameras < 1 or not 0 < load_fraction <= 1.5:
        raise ConfigError("a tuned load test needs cameras >= 1 and 0 < load_fraction <= 1.5")
    try:
        points = [BatchPoint(**p) for p in doc["points"]]
        s = doc["settings"]
        base = Budget(
            latency_budget_ms=float(s["latency_budget_ms"]),
            memory_budget_mb=_optional_float(s["memory_budget_mb"]),
            knee_gain=float(s["knee_gain"]),
        )
        threads = int(s["threads"])
        model = s.get("model_path")
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"not a `framebus tune` result (tune.json): {exc!r}") from None
    capacity = recommend(points, base).throughput_fps
    fps = load_fraction * capacity / cameras
    rec = recommend(points, replace(base, cameras=cameras, fps_per_camera=fps))
    return TunedLoad(
        capacity_fps=capacity,
        fps_per_camera=round(fps, 3),
        max_batch=rec.max_batch,
        max_wait_ms=rec.max_wait_ms,
        max_frame_age_ms=rec.max_frame_age_ms,
        batch_p99_ms=rec.p99_ms,
        threads=threads,
        model_path=Path(model) if model not in (None, "", "None") else None,
    )
