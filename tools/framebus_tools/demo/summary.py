"""The demo's closing summary: summary.json and the lines printed after the run."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from framebus.messages import short_track_label
from framebus_tools.demo.board import TracksBoard, class_of
from framebus_tools.pipeline import PipelineProcesses
from framebus_tools.runstats import RunStats, percentile


def startup_times(processes: PipelineProcesses, stats: RunStats) -> dict[str, float | None]:
    """Start-up, reported apart from the frames' latency (no frame is captured before it ends)."""
    first = stats.first_capture_us()
    return {
        "inferencer_ready_s": processes.inferencer_ready_s,
        "tracker_ready_s": processes.ready_s.get("tracker"),
        "alerts_ready_s": processes.ready_s.get("alerts"),
        "first_frame_after_decoder_start_s": (
            (first - processes.decoder_started_us) / 1e6 if first is not None else None
        ),
    }


@dataclass(frozen=True)
class Clips:
    """The clip records of this run's alerts by status, and the summary's line (None: no clips)."""

    by_status: dict[str, int]
    line: str | None


def summarize(
    stats: RunStats,
    board: TracksBoard,
    expected: int,
    out: Path,
    codes: dict[str, int],
    sheet: Path | None,
    startup: dict[str, float | None],
    clips: Clips,
    services: list[str],
) -> None:
    """Write summary.json to `out` and print the summary, with the log tail of a failed service.

    `codes`: the exit codes of the services that have ended (all of them, unless they run on).
    """
    statuses = stats.statuses()
    latencies = stats.all_latencies()
    summary = {
        "frames_published": expected,
        "detections_records": stats.total,
        "by_status": dict(statuses),
        "model_runs": statuses.get("INFERRED", 0),
        "model_runs_saved_by_motion_gate": statuses.get("STILL", 0),
        "boxes": sum(c.boxes for c in stats.cameras.values()),
        "latency_ms": {
            "mean": statistics.fmean(latencies) if latencies else None,
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
        },
        "batch_sizes": dict(sorted(stats.all_batch_sizes().items())),
        "tracks_records": board.records,
        "tracks_confirmed": len(board.confirmed),
        "tracked_latency_ms": {
            "p50": percentile(board.latencies_ms, 50),
            "p99": percentile(board.latencies_ms, 99),
        },
        "alerts": dict(Counter(a.rule_type.value for a in board.alerts)),
        "line_counts": board.line_counts(),
        "dwell_alerts": [
            {"camera": a.camera_id, "track": a.track_id, "seq": a.seq, "seconds": a.measure}
            for a in board.dwells()
        ],
        "clips": clips.by_status,
        "startup_s": startup,
        "exit_codes": codes,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    print("\nsummary")
    print(f"  frames in (published):  {expected}")
    by_status = ", ".join(f"{s} {n}" for s, n in statuses.items()) or "none"
    print(f"  detections out:         {stats.total} ({by_status})")
    print(f"  boxes:                  {summary['boxes']}")
    print(f"  motion gate:            {_gate_line(statuses)}")
    mean = summary["latency_ms"]["mean"]  # type: ignore[index]
    print(
        f"  mean latency:           {mean if mean is None else round(mean, 1)} ms "
        f"(p50 {percentile(latencies, 50):.0f}, p99 {percentile(latencies, 99):.0f}; capture -> result)"
    )
    _print_tracks(board)
    if clips.line is not None:
        print(f"  clips:                  {clips.line}")
    _print_startup(startup)
    logs = ", ".join(f"{name}.log" for name in services)
    print(f"  wrote:                  {out.resolve()}/summary.json, {logs}, cameras.yaml")
    if sheet is not None:
        print(f"  tracks drawn:           {sheet.resolve()}")
    for name, code in codes.items():
        if code not in (0, -15):  # -15: stopped by our SIGTERM
            log_tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-8:]
            print(
                f"  {name} exited with code {code}; last lines of its log:", *log_tail, sep="\n    "
            )


def _print_tracks(board: TracksBoard) -> None:
    lat = board.latencies_ms
    print(
        f"  tracks out:             {board.records} records, {len(board.confirmed)} tracks "
        f"confirmed (p50 {percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms; "
        "capture -> tracked)"
    )
    by_type = Counter(a.rule_type.value for a in board.alerts)
    print(
        f"  alerts:                 {', '.join(f'{k} {n}' for k, n in by_type.items()) or 'none'}"
    )
    counts = ", ".join(f"{k.replace(':', ' ')} {n}" for k, n in board.line_counts().items())
    print(f"  line crossings:         {counts or 'none'} (this run, all cameras)")
    dwells = [
        f"{a.camera_id} {short_track_label(a.track_id)} {class_of(a)} {a.measure:.1f} s "
        f"(frame #{a.seq})"
        for a in board.dwells()
    ]
    print(f"  dwell alerts:           {'; '.join(dwells) or 'none'}")


def _print_startup(startup: dict[str, float | None]) -> None:
    def secs(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} s"

    ready, first = startup["inferencer_ready_s"], startup["first_frame_after_decoder_start_s"]
    print(
        f"  start-up (apart):       inferencer ready in {secs(ready)} (model, warm-up, "
        f"partitions), tracker in {secs(startup['tracker_ready_s'])}, alerts in "
        f"{secs(startup['alerts_ready_s'])}; first frame captured {secs(first)} after the decoder "
        "started (camera open, producer id)"
    )


def _gate_line(statuses: Counter[str]) -> str:
    """How many model runs the motion gate saved (the still frames, answered without a run)."""
    still, answered = statuses.get("STILL", 0), sum(statuses.values())
    if not still:
        return "saved no model run (nothing was still, or the gate is off)"
    return (
        f"{still} of {answered} frames were still: {still / answered:.0%} of the model runs saved "
        "(the tracker carried the scene through them)"
    )
