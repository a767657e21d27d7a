"""`bench.marginal`'s summary: the medians, the ratios to the bare consumer, and the goals.

`report` prints the median row, each of framebus's figures against the bare consumer's of the
same run, the floors against the goals (`reach`: whether a floor leaves a goal reachable), the
broker's share, and with --workers the workers' figures against one process's and their floor.
"""

from __future__ import annotations

import math
import statistics

from bench.benchkit import verdict
from bench.marginal_figures import COLUMNS, RunFigures, row

GOAL_RATIO = 0.6  # framebus's own CPU a frame / the bare consumer's
GOAL_MS = 0.25  # framebus's own CPU a frame, ms: >= 4,000 frames/s per core of framebus work
GOAL_WORKERS = 1.0  # N workers' own CPU a frame together / one process's
GOAL_BROKER = 0.6  # the broker's CPU a frame during the drain / during an RGB drain


# framebus's figure, the bare consumer's of the same run, and what the line calls their ratio
RATIOS = (
    ("framebus_own", "bare", "framebus's own (outside the engine) / the bare consumer"),
    ("framebus_whole", "bare", "the whole framebus process / the bare consumer"),
    ("broker_framebus", "broker_bare", "the broker during framebus's drain / during the bare one"),
    ("window_framebus", "window_bare", "bench.capacity's window figures, framebus / bare"),
)


def median_ratio(runs: list[RunFigures], subject: str, base: str) -> tuple[float, list[float]]:
    """The median of the per-run ratios subject / base, and those ratios."""
    per_run = [getattr(r, subject) / getattr(r, base) for r in runs]
    return statistics.median(per_run), per_run


def reach(value: float, limit: float) -> str:
    """Whether a floor leaves a goal reachable."""
    return "below, reachable" if value <= limit else "above, capped by the libraries"


def report(runs: list[RunFigures]) -> dict[str, float]:
    """Print the medians, the ratios to the bare consumer and the goals; return the medians."""
    medians = {key: statistics.median(getattr(r, key) for r in runs) for key, _ in COLUMNS}
    print(row("median", medians))
    print(f"\nratios to the bare consumer, median of the per-run ratios ({len(runs)} runs):")
    for subject, base, title in RATIOS:
        ratio, per_run = median_ratio(runs, subject, base)
        medians[f"{subject}/{base}"] = ratio
        print(f"  {title}: {ratio:.2f} (runs {', '.join(f'{r:.2f}' for r in per_run)})")
    own, ratio = medians["framebus_own"], medians["framebus_own/bare"]
    print(
        f"\nframebus's own CPU a frame (outside the engine's run calls): {own:.3f} ms "
        f"({verdict(own, GOAL_MS, at_most=True)}), {ratio:.2f} x the bare consumer's "
        f"{medians['bare']:.3f} ms ({verdict(ratio, GOAL_RATIO, at_most=True)}); the whole process "
        f"{medians['framebus_whole']:.3f} ms ({medians['engine']:.3f} in the engine); the broker "
        f"{medians['broker_framebus']:.3f} ms a frame during framebus's drains, "
        f"{medians['broker_bare']:.3f} during the bare consumer's"
    )
    floor = medians["floor"]
    print(
        f"the floor under framebus's receive path: a bare consumer of framebus's own records "
        f"{floor:.3f} ms a frame (librdkafka and confluent-kafka alone); framebus's own less "
        f"that floor {own - floor:.3f} ms"
    )
    ratio_ms = GOAL_RATIO * medians["bare"]
    floors = (
        (
            "staged_floor",
            "the floor with the batch input's copy (each record also copied into a row of a "
            "batch buffer)",
        ),
        (
            "relay_floor",
            "the floor of any service answering each frame with one record (also decoding its "
            "head and producing a detections record; a batch flushed, then committed)",
        ),
    )
    for key, what in floors:
        value = medians[key]
        print(
            f"{what}: {value:.3f} ms a frame; against {GOAL_MS} ms: "
            f"{reach(value, GOAL_MS)}; against {GOAL_RATIO} x the bare consumer, "
            f"{ratio_ms:.3f} ms: {reach(value, ratio_ms)}; framebus's own less it "
            f"{own - value:.3f} ms"
        )
    fetch_fb, fetch_rgb = medians["broker_floor"], medians["broker_bare"]
    drain = medians["broker_framebus"]
    rgb_drain = drain - fetch_fb + fetch_rgb  # the same requests, RGB records fetched
    least = medians["broker_relay"]
    least_rgb = least - fetch_fb + fetch_rgb
    print(
        f"the broker, ms a frame: fetching framebus's records {fetch_fb:.3f}, RGB records "
        f"{fetch_rgb:.3f}; framebus's drain {drain:.3f}, so about {rgb_drain:.3f} with RGB records "
        f"(the same requests): {drain / rgb_drain:.2f} x; the relay (the least these clients ask "
        f"of it: one produce request per partition of a batch, librdkafka's way, and a commit) "
        f"{least:.3f}, {least_rgb:.3f} with RGB records: {least / least_rgb:.2f} x, "
        f"{reach(least / least_rgb, GOAL_BROKER)} for the goal <= {GOAL_BROKER} x"
    )
    longer_ms = medians["wall_framebus"] - medians["wall_relay"]
    idle_share = medians["broker_idle"] * longer_ms / 1000
    print(
        f"framebus's drain takes {longer_ms:.3f} ms a frame longer than the relay's; at the "
        f"broker's idle {medians['broker_idle']:.1f} ms of CPU a second that is {idle_share:.3f} "
        f"ms a frame of the {drain - least:.3f} framebus asks of the broker above the relay"
    )
    if not math.isnan(medians["workers_own"]):
        ratio, per_run = median_ratio(runs, "workers_own", "framebus_own")
        whole, _ = median_ratio(runs, "workers_whole", "framebus_whole")
        print(
            f"--workers: framebus's own CPU a frame, all the workers and the "
            f"supervisor together, {medians['workers_own']:.3f} ms against one process's "
            f"{own:.3f}: {ratio:.2f} x (runs {', '.join(f'{r:.2f}' for r in per_run)}; "
            f"{verdict(ratio, GOAL_WORKERS, at_most=True)}); the whole processes {whole:.2f} x"
        )
        relays, per_run = median_ratio(runs, "relays_floor", "relay_floor")
        print(
            f"the floor of --workers: as many relay processes, each on its share of the "
            f"partitions, {medians['relays_floor']:.3f} ms a frame together against one relay's "
            f"{medians['relay_floor']:.3f}: {relays:.2f} x (runs "
            f"{', '.join(f'{r:.2f}' for r in per_run)}); against the goal <= {GOAL_WORKERS} x: "
            f"{reach(relays, GOAL_WORKERS)}"
        )
    if any(getattr(r, key) <= 0 for r in runs for key in ("framebus_own", "bare")):
        print(
            "a run's marginal figure is not above zero: the processes' fixed costs varied by more "
            "than the extra frames cost; give --large more frames (the ratios are not meaningful)"
        )
    return medians
