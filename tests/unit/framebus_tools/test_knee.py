import pytest

from framebus_tools.perf.knee import BatchPoint, Budget, find_knee, recommend


def curve(
    throughputs: dict[int, float], ms_per_frame: float = 10.0, mb_per_frame: float = 50.0
) -> list[BatchPoint]:
    return [
        BatchPoint(
            b,
            t,
            p50_ms=b * 1000 / t,
            p99_ms=b * 1000 / t * 1.2,
            peak_memory_mb=200 + b * mb_per_frame,
        )
        for b, t in throughputs.items()
    ]


GPU_LIKE = curve({1: 120, 2: 200, 4: 280, 8: 420, 16: 450, 32: 460})


def test_find_knee_when_throughput_flattens_then_batch_before_flat_doubling() -> None:
    # 8 -> 16 gains 7 %, below the 10 % threshold.
    assert find_knee(GPU_LIKE, 0.10) == 8


def test_find_knee_when_cpu_curve_flat_from_start_then_batch_one() -> None:
    assert find_knee(curve({1: 9.5, 2: 9.6, 4: 9.4, 8: 9.5}), 0.10) == 1


def test_find_knee_when_still_growing_then_largest_measured() -> None:
    assert find_knee(curve({1: 10, 2: 20, 4: 40}), 0.10) == 4


def test_recommend_when_knee_within_budgets_then_knee_and_wait_from_target() -> None:
    rec = recommend(
        GPU_LIKE,
        Budget(latency_budget_ms=80, memory_budget_mb=10_000, cameras=16, fps_per_camera=25),
    )
    assert rec.max_batch == 8
    assert rec.fits
    # 40 % of 80 ms = 32 ms; 8 frames at 400 fps arrive in 20 ms, so waiting longer gains nothing.
    assert rec.max_wait_ms == pytest.approx(20.0)
    assert rec.replicas_needed == 1


def test_recommend_when_budget_given_then_frames_that_cannot_make_it_are_dropped_as_stale() -> None:
    rec = recommend(GPU_LIKE, Budget(latency_budget_ms=80, cameras=16, fps_per_camera=25))
    batch8_p99 = 8 / 420 * 1000 * 1.2  # 22.9 ms
    # Older than budget - batch p99 when its batch forms: it cannot finish inside the budget.
    assert rec.max_frame_age_ms == round(80 - batch8_p99)
    assert any("max_frame_age_ms" in r for r in rec.reasons)


def test_recommend_when_budget_barely_covers_compute_then_age_limit_never_below_max_wait() -> None:
    rec = recommend(curve({1: 9.5}), Budget(latency_budget_ms=150))  # batch 1 p99 = 126 ms
    assert rec.max_frame_age_ms == pytest.approx(rec.max_wait_ms, abs=0.5)


def test_recommend_when_latency_budget_tight_then_smaller_batch() -> None:
    # compute budget 0.6 * 40 = 24 ms: batch 4 has p99 = 4 / 280 * 1.2 s = 17 ms, batch 8 = 23 ms, 16 = 43 ms.
    rec = recommend(GPU_LIKE, Budget(latency_budget_ms=30))
    assert rec.max_batch == 4
    assert any("p99 batch latency" in r for r in rec.reasons)


def test_recommend_when_memory_budget_tight_then_capped_by_memory() -> None:
    rec = recommend(GPU_LIKE, Budget(latency_budget_ms=1000, memory_budget_mb=450))
    assert rec.max_batch == 4  # 200 + 8 * 50 = 600 MB > 450


def test_recommend_when_target_does_not_fit_then_says_so_with_replicas() -> None:
    cpu = curve({1: 9.5, 2: 9.6, 4: 9.4})
    rec = recommend(cpu, Budget(latency_budget_ms=1000, cameras=8, fps_per_camera=5))
    assert not rec.fits
    assert rec.replicas_needed == 5  # 40 fps / 9.5 fps
    assert any("does NOT fit" in r for r in rec.reasons)


def test_recommend_when_even_batch_one_over_budget_then_not_fit() -> None:
    rec = recommend(curve({1: 9.5, 2: 9.6}), Budget(latency_budget_ms=50))
    assert not rec.fits
    assert rec.max_batch == 1
    assert any("cannot be met" in r for r in rec.reasons)


def test_recommend_when_target_needs_more_than_knee_then_larger_batch_within_budget() -> None:
    rec = recommend(
        GPU_LIKE, Budget(latency_budget_ms=200, cameras=18, fps_per_camera=25, knee_gain=0.5)
    )
    # knee with 50 % gain threshold is 2 (2 -> 4 gains 40 %), but 450 fps needs batch 16.
    assert rec.max_batch == 16
    assert rec.fits


def test_helm_snippet_when_single_thread_processes_win_then_replicas_sized_in_them() -> None:
    from framebus_tools.perf.tune import LayoutResult, TuneResult
    from framebus_tools.perf.tunereport import helm_snippet

    points = curve({1: 4.0, 2: 4.5})
    rec = recommend(points, Budget(latency_budget_ms=2000, cameras=4, fps_per_camera=3))
    result = TuneResult(
        {"date": "today"},
        "CPUExecutionProvider",
        points,
        rec,
        LayoutResult(threads=2, one_process_fps=4.5, n_processes_fps=6.0),
    )
    snippet = helm_snippet(result, target_fps=12)
    # 12 fps / (6.0 / 2 per single-thread replica) = 4 replicas of one thread each.
    assert "replicas: 4" in snippet
    assert 'value: "1"' in snippet
    assert "maxBatch: 2" in snippet  # 1 -> 2 still gains 12 %
