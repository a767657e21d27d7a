"""Choosing a batch size from measurements: the knee, the budgets and the target load.

The method of the design documents: measure batch 1, 2, 4, 8, ...; the best batch is where
throughput stops growing (the knee), within the latency and memory budgets; about 60 % of the
latency budget goes to compute and 40 % to queueing and preprocessing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

COMPUTE_SHARE = 0.6  # of the latency budget, for the batch's inference
QUEUE_SHARE = 0.4  # for waiting to fill the batch, preprocessing and the Kafka hops


@dataclass(frozen=True)
class BatchPoint:
    """One measured batch size."""

    batch: int
    throughput_fps: float  # frames per second
    p50_ms: float  # batch latency
    p99_ms: float
    peak_memory_mb: float


@dataclass(frozen=True)
class Budget:
    """What the user allows and what the site needs."""

    latency_budget_ms: float = 100.0
    memory_budget_mb: float | None = None
    cameras: int = 0
    fps_per_camera: float = 0.0
    knee_gain: float = 0.10  # doubling the batch must gain at least this much throughput

    @property
    def target_fps(self) -> float:
        """Frames per second the site produces (0 when no target was given)."""
        return self.cameras * self.fps_per_camera


@dataclass(frozen=True)
class Recommendation:
    """The batch-size choice and why."""

    knee_batch: int
    max_batch: int
    max_wait_ms: float
    # A frame older than this when its batch forms cannot finish inside the latency budget:
    # the inferencer drops it as stale instead of delaying every frame behind it.
    max_frame_age_ms: float
    fits: bool
    replicas_needed: int
    reasons: tuple[str, ...]
    throughput_fps: float
    p99_ms: float


def find_knee(points: Sequence[BatchPoint], min_gain: float) -> int:
    """The batch after which a doubling gains less than `min_gain` (a fraction) of throughput."""
    ordered = sorted(points, key=lambda p: p.batch)
    if not ordered:
        raise ValueError("no measurements")
    for here, nxt in zip(ordered, ordered[1:], strict=False):
        doublings = math.log2(nxt.batch / here.batch)
        gain = (nxt.throughput_fps / here.throughput_fps) ** (1 / doublings) - 1
        if gain < min_gain:
            return here.batch
    return ordered[-1].batch


def recommend(points: Sequence[BatchPoint], budget: Budget) -> Recommendation:
    """Pick `max_batch`, `max_wait_ms` and `max_frame_age_ms`; say whether the target load fits."""
    ordered = sorted(points, key=lambda p: p.batch)
    knee = find_knee(ordered, budget.knee_gain)
    compute_ms = COMPUTE_SHARE * budget.latency_budget_ms
    reasons = [f"throughput knee at batch {knee} (a doubling gains < {budget.knee_gain:.0%})"]
    allowed = [p for p in ordered if p.p99_ms <= compute_ms]
    if len(allowed) < len(ordered):
        reasons.append(
            f"p99 batch latency must stay within {compute_ms:.0f} ms "
            f"({COMPUTE_SHARE:.0%} of the {budget.latency_budget_ms:.0f} ms budget)"
        )
    if budget.memory_budget_mb is not None:
        within = [p for p in allowed if p.peak_memory_mb <= budget.memory_budget_mb]
        if len(within) < len(allowed):
            reasons.append(f"peak memory must stay within {budget.memory_budget_mb:.0f} MB")
        allowed = within
    fits_budgets = bool(allowed)
    if not allowed:
        allowed = ordered[:1]
        reasons.append(
            "even batch 1 exceeds the budgets: the latency or memory target cannot be met"
        )
    candidates = [p for p in allowed if p.batch <= knee] or allowed[:1]
    chosen = candidates[-1]
    target = budget.target_fps
    if target > 0 and chosen.throughput_fps < target:
        enough = [p for p in allowed if p.throughput_fps >= target]
        if enough:
            chosen = enough[0]
            reasons.append(
                f"batch {chosen.batch}, past the knee, is the smallest that carries the target"
            )
    wait_ms = QUEUE_SHARE * budget.latency_budget_ms
    if target > 0:
        # Waiting longer than the time the site takes to produce a full batch gains nothing.
        wait_ms = min(wait_ms, 1000.0 * chosen.batch / target)
    max_age_ms = max(wait_ms, budget.latency_budget_ms - chosen.p99_ms)
    reasons.append(
        f"a frame older than {max_age_ms:.0f} ms when its batch forms cannot finish within the "
        f"{budget.latency_budget_ms:.0f} ms budget: max_frame_age_ms drops it as stale"
    )
    replicas = max(1, math.ceil(target / chosen.throughput_fps)) if target > 0 else 1
    fits = fits_budgets and (target <= 0 or chosen.throughput_fps >= target)
    if target > 0:
        verdict = "fits" if chosen.throughput_fps >= target else "does NOT fit"
        reasons.append(
            f"target {budget.cameras} cameras x {budget.fps_per_camera:g} fps = {target:.0f} fps "
            f"{verdict} one inferencer ({chosen.throughput_fps:.1f} fps at batch {chosen.batch}); "
            f"replicas needed: {replicas}"
        )
    return Recommendation(
        knee_batch=knee,
        max_batch=chosen.batch,
        max_wait_ms=round(wait_ms, 1),
        max_frame_age_ms=round(max_age_ms),
        fits=fits,
        replicas_needed=replicas,
        reasons=tuple(reasons),
        throughput_fps=chosen.throughput_fps,
        p99_ms=chosen.p99_ms,
    )
