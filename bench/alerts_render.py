"""Cost of the alerts rule engine and of render's drawing, as ratios to a same-run baseline.

Alerts: evaluating 8 zone rules (a 5-point polygon) on a detections record with 10 boxes, against
decoding that record from Avro (which any consumer pays). Render: rebuilding a 1080p frame from
its 640x640 letterboxed tensor and drawing 10 boxes, against only rebuilding it. Medians of
interleaved baseline/subject rounds; pure CPU, no broker.

Goal: no pass/fail threshold; it sizes `framebus alerts` (records/s a core evaluates, so how many
cameras one process serves) and says whether drawing or the rebuild bounds `framebus render`.

    .venv/bin/python -m bench.alerts_render [--rounds 5]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from bench.benchkit import parser_for, print_header
from framebus.codec import DetectionsCodec
from framebus.letterbox import Letterbox
from framebus.messages import Box, Detections, Frame, FrameStatus, TensorLayout
from framebus_alerts.rules import Rule, RuleEngine
from framebus_tools.render.draw import draw_detections, original_frame

CAMERAS = 64
BOXES = 10
RULES = 8


def median_rounds(
    base: Callable[[], float], work: Callable[[], float], rounds_count: int
) -> tuple[float, float]:
    """Medians of interleaved baseline and subject rounds (the machine may be shared)."""
    rounds = [(base(), work()) for _ in range(rounds_count)]
    return statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)


def per_second(fn: Callable[[int], None], n: int) -> float:
    """Items per second of `fn(n)`, after a warm-up call."""
    fn(min(n, 100))  # warm up
    start = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - start)


def records(n: int) -> list[Detections]:
    """`n` detections records of BOXES person boxes each, over CAMERAS cameras."""
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        xy = rng.uniform(0, 1800, size=(BOXES, 2))
        boxes = tuple(
            Box(float(x), float(y), float(x) + 80, float(y) + 160, 0, "person", 0.8) for x, y in xy
        )
        out.append(
            Detections(f"cam-{i % CAMERAS}", i // CAMERAS, i, FrameStatus.INFERRED, "m", "1", boxes)
        )
    return out


def bench_alerts(rounds: int, n: int = 20_000) -> None:
    """Print decode and rule-evaluation rates and their ratio."""
    dets = records(n)
    codec = DetectionsCodec()
    payloads = [codec.encode(d) for d in dets]
    zone = ((300.0, 200.0), (1500.0, 250.0), (1700.0, 1000.0), (200.0, 1050.0), (100.0, 600.0))
    rules = [Rule(name=f"r{i}", zone=zone, min_consecutive=3) for i in range(RULES)]

    def decode(k: int) -> None:
        for p in payloads[:k]:
            codec.decode(p)

    def evaluate(k: int) -> None:
        engine = RuleEngine(rules)
        for d in dets[:k]:
            engine.observe(d)

    base, work = median_rounds(
        lambda: per_second(decode, n), lambda: per_second(evaluate, n), rounds
    )
    print(
        f"alerts: decode {base:,.0f} records/s, evaluate {RULES} rules x {BOXES} boxes "
        f"{work:,.0f} records/s; evaluation costs {base / work:.2f}x a decode"
    )


def bench_render(rounds: int, n: int = 40) -> None:
    """Print rebuild and rebuild + draw rates and what drawing adds."""
    lb = Letterbox.fit(1920, 1080, 640, 640)
    tensor = np.full((640, 640, 3), 114, np.uint8)
    frame = Frame(
        "cam-0", 0, 0, 1920, 1080, (640, 640, 3), TensorLayout.HWC, lb.scale, lb.pad_x,
        lb.pad_y, tensor.tobytes(),
    )  # fmt: skip
    det = records(1)[0]

    def rebuild(k: int) -> None:
        for _ in range(k):
            original_frame(frame)

    def rebuild_and_draw(k: int) -> None:
        for _ in range(k):
            draw_detections(original_frame(frame), frame, det)

    base, work = median_rounds(
        lambda: per_second(rebuild, n), lambda: per_second(rebuild_and_draw, n), rounds
    )
    print(
        f"render: rebuild 1080p {base:,.1f} frames/s, rebuild + draw {BOXES} boxes "
        f"{work:,.1f} frames/s; drawing adds {base / work - 1:.0%}"
    )


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    args = parser.parse_args()
    print_header(None)
    print(f"medians of {args.rounds} interleaved rounds")
    bench_alerts(args.rounds)
    bench_render(args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
