"""`bench.marginal`'s arithmetic: one run's marginal figures from its processes' lives.

`RunFigures` holds a run's figures, ms of CPU a frame, each (CPU draining the large topic - the
small one) / (frames difference) as `per_frame_ms` computes it; `figures` derives them from the
`Life` pairs; `COLUMNS` and `row` print them as one line of the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.marginal_lives import Life


@dataclass(frozen=True)
class RunFigures:
    """One run's marginal figures, ms of CPU a frame."""

    framebus_own: float  # the inferencer process less its engine
    framebus_whole: float  # the inferencer process
    engine: float  # inside the engine's run calls
    bare: float  # the bare consumer process
    broker_framebus: float  # the broker while framebus drained
    broker_bare: float  # the broker while the bare consumer read
    window_framebus: float  # bench.capacity's window figure of the large drain, whole process
    window_bare: float  # the same for the bare consumer
    # The bare consumer of framebus's own records (its frame format): what librdkafka and
    # confluent-kafka alone cost for those bytes, the floor under framebus's receive path.
    floor: float
    # The same consumer also copying each record into a batch buffer's row: the floor of any
    # consumer that hands a batched model its frames (one contiguous input, one copy a frame).
    staged_floor: float
    broker_floor: float  # the broker while the floor consumer read: fetching those records
    # The staging consumer also answering each record with a detections record (decode its head,
    # encode, produce, flush and commit a batch): what every such service pays these libraries.
    relay_floor: float
    broker_relay: float  # the broker meanwhile
    # With --workers N: `framebus inferencer --workers N` draining the same frames (nan without)
    workers_own: float = float("nan")
    workers_whole: float = float("nan")
    # and N relay processes, each on its share of the partitions: the floor of N workers
    relays_floor: float = float("nan")
    # Wall time a frame, marginal, of framebus's drain and the relay's (ms), and the broker's
    # idle CPU (ms a second): what the longer drain alone costs the broker.
    wall_framebus: float = float("nan")
    wall_relay: float = float("nan")
    broker_idle: float = float("nan")


def per_frame_ms(small: float, large: float, frames: tuple[int, int]) -> float:
    """(large - small) / (frames large - frames small), in ms."""
    return (large - small) * 1000 / (frames[1] - frames[0])


def figures(
    fb: tuple[Life, Life],
    bare: tuple[Life, Life],
    floor: tuple[Life, Life],
    staged: tuple[Life, Life],
    relay: tuple[Life, Life],
    workers: tuple[Life, Life] | None = None,
    relays: tuple[Life, Life] | None = None,
    broker_idle: float = float("nan"),
) -> RunFigures:
    """The marginal figures of one run from its processes (small, large)."""
    n = (fb[0].frames, fb[1].frames)
    by_workers: dict[str, float] = {}
    if workers is not None and relays is not None:
        by_workers = {
            "relays_floor": per_frame_ms(relays[0].cpu_s, relays[1].cpu_s, n),
            "workers_own": per_frame_ms(
                workers[0].cpu_s - workers[0].engine_s, workers[1].cpu_s - workers[1].engine_s, n
            ),
            "workers_whole": per_frame_ms(workers[0].cpu_s, workers[1].cpu_s, n),
        }
    return RunFigures(
        **by_workers,
        broker_idle=broker_idle,
        framebus_own=per_frame_ms(fb[0].cpu_s - fb[0].engine_s, fb[1].cpu_s - fb[1].engine_s, n),
        framebus_whole=per_frame_ms(fb[0].cpu_s, fb[1].cpu_s, n),
        engine=per_frame_ms(fb[0].engine_s, fb[1].engine_s, n),
        bare=per_frame_ms(bare[0].cpu_s, bare[1].cpu_s, n),
        broker_framebus=per_frame_ms(fb[0].broker_s, fb[1].broker_s, n),
        broker_bare=per_frame_ms(bare[0].broker_s, bare[1].broker_s, n),
        window_framebus=fb[1].window_cpu_s * 1000 / fb[1].window_frames,
        window_bare=bare[1].window_cpu_s * 1000 / bare[1].window_frames,
        floor=per_frame_ms(floor[0].cpu_s, floor[1].cpu_s, n),
        staged_floor=per_frame_ms(staged[0].cpu_s, staged[1].cpu_s, n),
        broker_floor=per_frame_ms(floor[0].broker_s, floor[1].broker_s, n),
        relay_floor=per_frame_ms(relay[0].cpu_s, relay[1].cpu_s, n),
        broker_relay=per_frame_ms(relay[0].broker_s, relay[1].broker_s, n),
        wall_framebus=per_frame_ms(fb[0].wall_s, fb[1].wall_s, n),
        wall_relay=per_frame_ms(relay[0].wall_s, relay[1].wall_s, n),
    )


COLUMNS = (
    ("framebus_own", "fb own"),
    ("framebus_whole", "fb whole"),
    ("engine", "engine"),
    ("bare", "bare"),
    ("broker_framebus", "broker fb"),
    ("broker_bare", "broker bare"),
    ("window_framebus", "window fb"),
    ("window_bare", "window bare"),
    ("floor", "bare fb-fmt"),
    ("staged_floor", "+ staging"),
    ("broker_floor", "broker fb-fmt"),
    ("relay_floor", "+ relay"),
    ("broker_relay", "broker rel"),
    ("workers_own", "N wk own"),
    ("workers_whole", "N wk whole"),
    ("relays_floor", "N relays"),
    ("wall_framebus", "wall fb"),
    ("wall_relay", "wall relay"),
    ("broker_idle", "broker idle"),
)


def row(label: str, values: dict[str, float]) -> str:
    """One line of the table: the run's label and each column's figure."""
    return f"{label:>6} " + " ".join(f"{values[key]:>11.3f}" for key, _ in COLUMNS)
