"""The demo's view of the tracks and alerts topics: tallies and the lines it prints, no Kafka."""

from __future__ import annotations

import sys
from collections import Counter, deque
from dataclasses import dataclass, field

from framebus.messages import Alert, FrameStatus, RuleType, Tracks, short_track_label
from framebus_tools.runstats import DecoderView, RunStats


class TracksBoard:
    """What the tracks and alerts topics said this run: latest tracks per camera, the alerts."""

    def __init__(self) -> None:
        self.latest: dict[str, Tracks] = {}
        self.records = 0
        self.confirmed: set[str] = set()  # track ids confirmed this run
        self.alerts: list[Alert] = []
        self.latencies_ms: list[float] = []  # capture -> tracked, looked-at frames

    def add_tracks(self, tracks: Tracks) -> None:
        """Account for one tracks record."""
        self.records += 1
        if tracks.status is FrameStatus.INFERRED:
            self.latencies_ms.append((tracks.tracked_at_us - tracks.capture_ts_us) / 1000)
        if tracks.seq >= getattr(self.latest.get(tracks.camera_id), "seq", -1):
            self.latest[tracks.camera_id] = tracks
        self.confirmed.update(o.track_id for o in tracks.objects if o.confirmed)

    def add_alert(self, alert: Alert) -> None:
        """Account for one alert."""
        self.alerts.append(alert)

    def table(self) -> str:
        """Per camera: the latest tracks record's seq and its objects' short track ids."""
        head = f"{'camera':<14}{'seq':>6}  tracks on the latest frame (? = not confirmed yet)"
        rows = [head, "-" * len(head)]
        for cid, tracks in sorted(self.latest.items()):
            rows.append(f"{cid:<14}{tracks.seq:>6}  {_objects(tracks, boxes=False)}")
        return "\n".join(rows)

    def line_counts(self) -> dict[str, int]:
        """Line crossings of this run, all cameras, by "<class>:<direction>"."""
        counts = Counter(
            f"{class_of(a)}:{a.direction.value}"
            for a in self.alerts
            if a.rule_type is RuleType.LINE_CROSSING
        )
        return dict(sorted(counts.items()))

    def dwells(self) -> list[Alert]:
        """Dwell alerts of this run."""
        return [a for a in self.alerts if a.rule_type is RuleType.DWELL]


def class_of(alert: Alert) -> str:
    """The class of the alert's first box ("?" without boxes)."""
    return alert.boxes[0].class_name if alert.boxes else "?"


def _objects(tracks: Tracks, boxes: bool) -> str:
    if tracks.status is not FrameStatus.INFERRED:
        return f"not looked at ({tracks.status.value})"
    parts = []
    for o in tracks.objects:
        label = short_track_label(o.track_id) + ("" if o.confirmed else "?")
        b = o.box
        where = f" [{b.x1:.0f},{b.y1:.0f},{b.x2:.0f},{b.y2:.0f}]" if boxes else ""
        parts.append(f"{label} {b.class_name}{where}")
    return ", ".join(parts) or "nothing"


def track_line(tracks: Tracks) -> str:
    """One tracks record as a line: camera, seq, latency, each object with its short track id."""
    return (
        f"{tracks.camera_id} #{tracks.seq:<4} {tracks.e2e_latency_ms:7.1f} ms  "
        f"{_objects(tracks, boxes=True)}"
    )


def alert_line(alert: Alert) -> str:
    """One alert as a line: what fired, on which track, and its measure or counts."""
    who = f"{short_track_label(alert.track_id)} {class_of(alert)}" if alert.track_id else ""
    head = f"ALERT {alert.camera_id} frame {alert.seq}, {alert.rule}:"
    if alert.rule_type is RuleType.DWELL:
        return f"{head} {who} dwelt {alert.measure:.1f} s in the zone"
    if alert.rule_type is RuleType.LINE_CROSSING:
        counts = ", ".join(f"{k} {n}" for k, n in alert.counts)
        return f"{head} {who} crossed the line {alert.direction.value} (running counts: {counts})"
    if alert.rule_type is RuleType.OCCUPANCY:
        return f"{head} {alert.measure:.0f} objects in the zone"
    return f"{head} {alert.rule_type.value} {who}".rstrip()


@dataclass
class Live:
    """What the demo prints as records arrive: redrawn in place on a terminal, else appended."""

    live: bool = field(default_factory=sys.stdout.isatty)
    recent: deque[str] = field(default_factory=lambda: deque(maxlen=10))
    recent_alerts: deque[str] = field(default_factory=lambda: deque(maxlen=6))
    banner: str = ""  # a line kept above the tables (the live page's URL)

    def record(self, line: str) -> None:
        """Show one tracks record's line."""
        self.recent.append(line)
        if not self.live:
            print(line, flush=True)

    def alert(self, line: str) -> None:
        """Show one alert's line."""
        self.recent_alerts.append(line)
        if not self.live:
            print(line, flush=True)

    def show(
        self,
        stats: RunStats,
        inputs: dict[str, DecoderView],
        board: TracksBoard,
        final: bool = False,
    ) -> None:
        """Print the tables (and, on a terminal, the latest lines) once more.

        `final`: the summary after the run, with each camera's whole-run rate.
        """
        tables = stats.table(inputs, whole_run=final) + "\n\n" + board.table()
        if self.banner:
            tables = self.banner + "\n\n" + tables
        if self.live:
            sys.stdout.write(
                "\x1b[H\x1b[2J"
                + tables
                + "\n\nlatest tracks:\n"
                + "\n".join(self.recent)
                + "\n\nlatest alerts:\n"
                + ("\n".join(self.recent_alerts) or "-")
                + "\n"
            )
            sys.stdout.flush()
        else:
            print("\n" + tables + "\n", flush=True)
