"""What the chaos soak checks once the run has drained: Kafka read back, an offline reference.

A frame is known by (camera, seq, capture_ts_us): the decoder numbers each camera's frames from 0
again when it restarts, so seq alone repeats; the capture time tells the runs apart (as the
tracker's and the alerts engine's `framebus.sequence.arrival` do).

The reference replays the committed detections topic, per camera in partition order, through the
tracker's and the alerts engine's pure logic (`CameraTracker.step` with the detections record's
partition and offset, as `framebus_tracker.service` calls it; `AlertEngine.observe` with the
tracks record's detections partition and offset, as `framebus_alerts.service` does): what an
uninterrupted run makes of the same detections. Track ids need no help to match: a camera's
epoch is the capture second of its first record, or the last epoch + 1 at a decoder restart, so
it follows from the data alone, as long as the tracker's state survived every fault.
"""

from __future__ import annotations

import dataclasses
import signal
import statistics
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import confluent_kafka

from framebus.kafka.settings import KafkaSettings
from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES
from framebus.messages import Alert, Clip, ClipStatus, Detections, FrameStatus, Tracks
from framebus.telemetry.watchdog import EXIT_STALLED
from framebus_alerts.engine import AlertEngine
from framebus_alerts.rules import load_rules
from framebus_tracker.service import TrackProcessor
from framebus_tracker.settings import TrackerSettings
from framebus_tracker.tracker import CameraTracker
from tests.reliability.chaos import Incarnation, Injected

T = TypeVar("T")
FrameKey = tuple[str, int, int]  # (camera, seq, capture_ts_us)
ALLOWED = {FrameStatus.INFERRED, FrameStatus.STILL, FrameStatus.DROPPED_STALE}
WINDOW_SLACK_S = 10.0  # after every service is ready again, frames may still be catching up
RSS_WARM_UP_S = 120.0  # as test_soak.py
RSS_GROWTH = 0.20  # faults come and go: the soak's 10 % is for a run without them
# A fault's burst (a restore reading a changelog, a backlog filling a consumer's prefetch) leaves
# freed heap that glibc keeps: up to the inferencer's trim threshold by design, and about as much
# by glibc's own ceiling elsewhere. Growth within it is no leak in a run this short.
RSS_KEPT_HEAP_KIB = MALLOC_TRIM_THRESHOLD_BYTES // 1024
# A clean exit (the schedule's SIGTERM), the schedule's SIGKILL, the watchdog's restart request.
EXPECTED_EXITS = frozenset({0, -signal.SIGKILL, EXIT_STALLED})


@dataclass(frozen=True)
class Rec(Generic[T]):
    """One record read back: where it was and what it says."""

    partition: int
    offset: int
    value: T


def scan(
    kafka: KafkaSettings, topic: str, decode: Callable[[bytes], T], timeout_s: float = 180.0
) -> list[Rec[T]]:
    """Every committed record of `topic` (read_committed), to its end, in (partition, offset) order.

    Each value is decoded as it arrives (a frames topic does not fit in memory as raw records).
    Fails when a partition cannot be read to its end: a transaction left open blocks it.
    """
    consumer = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"chaos-reader-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        tps = [confluent_kafka.TopicPartition(topic, p, 0) for p in sorted(meta.partitions)]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, 30)[1] for tp in tps}
        consumer.assign(tps)
        out: list[Rec[T]] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    out.append(Rec(msg.partition(), msg.offset(), decode(msg.value())))
            positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
            # An empty partition never gets a position (OFFSET_INVALID): nothing to read there.
            if all(end == 0 or positions[p] >= end for p, end in ends.items()):
                break
        else:
            raise AssertionError(f"{topic}: not read to its end {ends} within {timeout_s} s")
    finally:
        consumer.close()
    return sorted(out, key=lambda r: (r.partition, r.offset))


def key_of(record: Detections | Tracks) -> FrameKey:
    """The frame a record is about."""
    return (record.camera_id, record.seq, record.capture_ts_us)


# --- The offline reference ----------------------------------------------------------------------


def reference_tracks(
    detections: Sequence[Rec[Detections]], settings: TrackerSettings
) -> list[Tracks]:
    """The tracks an uninterrupted tracker makes of `detections` (read_committed, topic order)."""
    config = TrackProcessor(settings).config  # the service's own reading of its settings
    trackers: dict[str, CameraTracker] = {}
    out = []
    for r in detections:
        cam = r.value.camera_id
        tracker = trackers.setdefault(cam, CameraTracker(cam, config))
        tracks = tracker.step(r.value, partition=r.partition, offset=r.offset)
        if tracks is not None:
            out.append(tracks)
    return out


def reference_alerts(tracks: Iterable[Tracks], rules: Path) -> list[Alert]:
    """The alerts an uninterrupted alerts engine fires on `tracks`, in their order."""
    engine = AlertEngine(load_rules(rules))
    out = []
    for t in tracks:
        out += engine.observe(t, t.detections_partition, t.detections_offset)
    return out


# --- Invariants: each returns the problems found (empty: it holds) ------------------------------


def one_record_each(
    frames: Iterable[FrameKey], detections: Sequence[Detections], tracks: Sequence[Tracks]
) -> list[str]:
    """Each frame has exactly one detections and one tracks record, of an allowed status."""
    wanted = set(frames)
    problems = []
    for name, records in (("detections", detections), ("tracks", tracks)):
        seen = Counter(key_of(r) for r in records)
        missing = wanted - set(seen)
        doubled = {k: n for k, n in seen.items() if n > 1}
        strays = set(seen) - wanted
        if missing:
            problems.append(f"{len(missing)} frames without a {name} record: {sorted(missing)[:5]}")
        if doubled:
            problems.append(
                f"{len(doubled)} frames with more than one {name} record: "
                f"{sorted(doubled.items())[:5]}"
            )
        if strays:
            problems.append(f"{len(strays)} {name} records of no frame: {sorted(strays)[:5]}")
        bad = [
            key_of(r)
            for r in records
            if r.status not in ALLOWED or (r.status is FrameStatus.DROPPED_STALE and not r.reason)
        ]
        if bad:
            problems.append(f"{len(bad)} {name} records of a status not allowed: {bad[:5]}")
    return problems


def _signature(t: Tracks) -> tuple[Any, ...]:
    return (t.status, t.missing_before, tuple((o.track_id, o.confirmed) for o in t.objects))


def tracks_match(reference: Sequence[Tracks], actual: Sequence[Tracks]) -> list[str]:
    """Each frame's track ids (and status, gap count, confirmations) equal the reference's."""
    want = {key_of(t): _signature(t) for t in reference}
    got: dict[FrameKey, tuple[Any, ...]] = {}
    for t in actual:
        got.setdefault(key_of(t), _signature(t))
    differ = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    problems = []
    if differ:
        k = differ[0]
        problems.append(
            f"{len(differ)} tracks records differ from the reference, first {k}: "
            f"got {got[k]}, reference {want[k]}"
        )
    if want.keys() != got.keys():
        problems.append(
            f"tracks of {len(want.keys() - got.keys())} frames missing, "
            f"{len(got.keys() - want.keys())} beyond the reference"
        )
    return problems


def alert_key(a: Alert) -> tuple[str, str, int, int, str]:
    """What makes an alert the same alert: rule, camera, frame and track."""
    return (a.rule, a.camera_id, a.seq, a.capture_ts_us, a.track_id)


def alerts_match(reference: Sequence[Alert], actual: Sequence[Alert]) -> list[str]:
    """The same alerts as the reference (all fields but the firing time), each exactly once."""
    want = Counter(dataclasses.replace(a, fired_at_us=0) for a in reference)
    got = Counter(dataclasses.replace(a, fired_at_us=0) for a in actual)
    problems = []
    doubled = [alert_key(a) for a, n in got.items() if n > 1]
    if doubled:
        problems.append(f"{len(doubled)} alerts more than once: {doubled[:5]}")
    missing = [alert_key(a) for a in want.keys() - got.keys()]
    extra = [alert_key(a) for a in got.keys() - want.keys()]
    if missing:
        problems.append(f"{len(missing)} alerts of the reference not published: {missing[:5]}")
    if extra:
        problems.append(f"{len(extra)} alerts the reference does not fire: {extra[:5]}")
    return problems


def clips_match(alerts: Sequence[Alert], clips: Sequence[Clip]) -> list[str]:
    """Exactly one clip record per alert, none FAILED (NO_VIDEO: the decoder writes no video)."""
    want = {alert_key(a) for a in alerts}
    got = Counter((c.rule, c.camera_id, c.seq, c.capture_ts_us, c.track_id) for c in clips)
    problems = []
    if want != set(got):
        problems.append(
            f"clips: {len(want - set(got))} alerts without one, {len(set(got) - want)} of no alert"
        )
    doubled = [k for k, n in got.items() if n > 1]
    if doubled:
        problems.append(f"{len(doubled)} alerts with more than one clip record: {doubled[:5]}")
    failed = [(c.camera_id, c.seq, c.reason) for c in clips if c.status is ClipStatus.FAILED]
    if failed:
        problems.append(f"{len(failed)} clips FAILED: {failed[:5]}")
    return problems


def decoder_runs(frames: Sequence[FrameKey]) -> dict[str, list[list[int]]]:
    """Per camera, the seqs of each decoder run in topic order (a run begins where seq falls)."""
    runs: dict[str, list[list[int]]] = defaultdict(list)
    for cam, seq, _ in frames:
        mine = runs[cam]
        if not mine or seq <= mine[-1][-1]:
            mine.append([])
        mine[-1].append(seq)
    return dict(runs)


def seq_gaps(frames: Sequence[FrameKey]) -> list[str]:
    """Each decoder run numbers from 0 without a hole: a hole is a frame lost after publishing.

    (A killed decoder loses the frames it had not sent yet: its run ends early, no hole.)
    """
    problems = []
    for cam, runs in decoder_runs(frames).items():
        for i, seqs in enumerate(runs):
            if seqs != list(range(len(seqs))):
                problems.append(f"{cam} run {i}: seqs {seqs[0]}..{seqs[-1]} with holes")
    return problems


@dataclass(frozen=True)
class Window:
    """A fault's span in wall-clock seconds: from its injection until all is ready again + slack."""

    fault: Injected
    start_s: float
    end_s: float


def fault_windows(
    injected: Sequence[Injected], changes: Sequence[tuple[float, str, bool]], services: int
) -> list[Window]:
    """Each fault's window: injection to the first moment, after its hold, every service is ready."""
    out = []
    for inj in injected:
        after = inj.at + inj.fault.hold_s
        ready_at = all_ready_from(changes, services, after)
        end = (ready_at if ready_at is not None else after + 120.0) + WINDOW_SLACK_S
        out.append(Window(inj, inj.wall_s, inj.wall_s + (end - inj.at)))
    return out


def all_ready_from(
    changes: Sequence[tuple[float, str, bool]], services: int, since: float
) -> float | None:
    """The first time at or after `since` when all `services` answered ready (None: never)."""
    state: dict[str, bool] = {}
    for t, name, ok in changes:
        if t > since and len(state) == services and all(state.values()):
            return since  # all ready already when `since` came
        state[name] = ok
        if t >= since and len(state) == services and all(state.values()):
            return t
    return since if len(state) == services and all(state.values()) else None


@dataclass(frozen=True)
class Gap:
    """A hole in a camera's capture times."""

    camera: str
    start_s: float
    end_s: float
    lost: int  # frames the camera's rate would have given in it
    kinds: tuple[str, ...]  # faults whose windows explain it (empty: unexpected)


def capture_gaps(
    frames: Sequence[FrameKey], fps: float, windows: Sequence[Window], min_gap_s: float = 3.0
) -> list[Gap]:
    """Holes over `min_gap_s` in each camera's capture times, with the faults that explain each.

    3 s: on two saturated cores the decoder's capture stutters by up to ~1.5 s on all cameras at
    once (seen with no fault of the decoder's); a dead source or a stopped decoder leaves more.
    """
    by_cam: dict[str, list[int]] = defaultdict(list)
    for cam, _, ts in frames:
        by_cam[cam].append(ts)
    gaps = []
    for cam, stamps in by_cam.items():
        for a, b in zip(stamps, stamps[1:], strict=False):
            a_s, b_s = a / 1e6, b / 1e6
            if b_s - a_s <= min_gap_s:
                continue
            why = tuple(
                w.fault.fault.kind.value
                for w in windows
                if w.fault.fault.stops_frames_of(cam) and a_s <= w.end_s and b_s >= w.start_s
            )
            gaps.append(Gap(cam, a_s, b_s, round((b_s - a_s) * fps) - 1, why))
    return gaps


def camera_tails(frames: Sequence[FrameKey], stopped_wall_s: float, slack_s: float) -> list[str]:
    """Each camera still produced frames until the decoder was stopped (within `slack_s`).

    A camera that went quiet for good loses its frames at the end, where no gap shows them.
    """
    last: dict[str, int] = {}
    for cam, _, ts in frames:
        last[cam] = max(last.get(cam, 0), ts)
    return [
        f"{cam}: no frame in the last {stopped_wall_s - ts / 1e6:.0f} s before the decoder stopped"
        for cam, ts in sorted(last.items())
        if ts / 1e6 < stopped_wall_s - slack_s
    ]


def rss_growth(incarnations: Mapping[str, Sequence[Incarnation]]) -> tuple[list[str], list[str]]:
    """(problems, lines): per process that lived past warm-up, the RSS trend after it.

    Compares the median of the last third of the samples after warm-up to the first third's:
    a leak grows steadily, while a fault's backlog (a producer queue while a broker is away) is
    a bump that comes and goes, bounded by the queue's size. Growth is a problem past both 20 %
    and the heap glibc may keep after a fault's burst (`RSS_KEPT_HEAP_KIB`). Samples taken with a backlog (the
    supervisor's `backlog` probe) are left out: a fault near the end would otherwise leave its
    bump in the last third.
    """
    problems, lines = [], []
    for name, incs in incarnations.items():
        for inc in incs:
            skip = set(inc.backlogged)
            after = [kb for t, kb in inc.rss if t - inc.started >= RSS_WARM_UP_S and t not in skip]
            if len(after) < 6:
                continue
            third = len(after) // 3
            first, last = statistics.median(after[:third]), statistics.median(after[-third:])
            growth = (last - first) / first
            lines.append(
                f"{name} pid {inc.pid}: {first / 1024:.0f} -> {last / 1024:.0f} MiB "
                f"({growth:+.1%}, {len(after)} samples, {len(skip)} with a backlog left out)"
            )
            if growth > RSS_GROWTH and last - first > RSS_KEPT_HEAP_KIB:
                problems.append(f"{name} pid {inc.pid} RSS grew {growth:.1%} after warm-up")
    return problems, lines


def unexpected_exits(restarts: Sequence[tuple[float, str, int]], start: float) -> list[str]:
    """Each exit the supervisor saw that is neither clean, a SIGKILL nor the watchdog's.

    A fault must be recovered from inside the service or end it the designed way: an exit 1
    (a traceback) or 2 (an error) after a broker's death is a fault the service does not handle.
    """
    return [
        f"{name} exited {code} at {when - start:.0f} s (expected {sorted(EXPECTED_EXITS)})"
        for when, name, code in restarts
        if code not in EXPECTED_EXITS
    ]


# --- Figures ------------------------------------------------------------------------------------


def recovery_times(
    injected: Sequence[Injected], changes: Sequence[tuple[float, str, bool]], end: float
) -> dict[str, list[float]]:
    """Per service, seconds from each fault until it was ready again (searching to the end), for
    the faults it was unready at or went unready after, before the next fault; inf: never again.
    """
    out: dict[str, list[float]] = defaultdict(list)
    bounds = [i.at for i in injected] + [end]
    for i in range(len(injected)):
        lo, nxt = bounds[i], bounds[i + 1]
        state = {n: ok for t, n, ok in changes if t < lo}  # changes are in time order
        downs = {n: lo for n, ok in state.items() if not ok}
        for t, n, ok in changes:
            if lo <= t < nxt and not ok:
                downs[n] = t  # its last going down before the next fault
        for name, down in downs.items():
            back = next((t for t, n, ok in changes if n == name and ok and t > down), None)
            out[name].append(float("inf") if back is None else back - lo)
    return dict(out)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank; nan for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def latency_split(
    detections: Sequence[Detections], windows: Sequence[Window]
) -> tuple[list[float], list[float]]:
    """End-to-end latency (capture to detections record, ms): during fault windows, and outside."""
    during, outside = [], []
    for d in detections:
        at = d.capture_ts_us / 1e6
        inside = any(w.start_s <= at <= w.end_s for w in windows)
        (during if inside else outside).append(d.e2e_latency_ms)
    return during, outside


def faults_by_kind(injected: Sequence[Injected]) -> dict[str, int]:
    """How many faults of each kind were injected."""
    return dict(Counter(i.fault.kind.value for i in injected))
