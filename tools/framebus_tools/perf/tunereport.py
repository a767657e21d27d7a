"""What `framebus tune` writes: its table, the Helm values it recommends, JSON and a plot."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from framebus_tools.perf.extras import require_tools_extra
from framebus_tools.perf.tune import TuneResult, TuneSettings


def format_table(result: TuneResult) -> str:
    """The terminal table and the recommendation."""
    rows = [f"{'batch':>5} {'frames/s':>9} {'p50 ms':>8} {'p99 ms':>8} {result.memory.column:>8}"]
    for p in result.points:
        mark = "  <- knee" if p.batch == result.recommendation.knee_batch else ""
        rows.append(
            f"{p.batch:>5} {p.throughput_fps:>9.1f} {p.p50_ms:>8.1f} {p.p99_ms:>8.1f} "
            f"{p.peak_memory_mb:>8.0f}{mark}"
        )
    rec = result.recommendation
    rows += [
        f"{result.memory.column}: {result.memory.note}",
        "",
        f"recommended: max_batch={rec.max_batch} max_wait_ms={rec.max_wait_ms:g} "
        f"max_frame_age_ms={rec.max_frame_age_ms:g} "
        f"({'target fits' if rec.fits else 'target does NOT fit'}; replicas needed: "
        f"{rec.replicas_needed})",
    ]
    rows += [f"  - {r}" for r in rec.reasons]
    if result.layout:
        lay = result.layout
        rows.append(
            f"CPU layout: 1 x {lay.threads} threads {lay.one_process_fps:.1f} fps vs "
            f"{lay.threads} x 1 thread {lay.n_processes_fps:.1f} fps "
            f"({lay.n_processes_fps / lay.one_process_fps:.2f}x) -> {lay.better}"
        )
    return "\n".join(rows)


def helm_snippet(result: TuneResult, target_fps: float = 0.0) -> str:
    """Values to paste into the Helm chart."""
    rec = result.recommendation
    replicas, threads = rec.replicas_needed, 0
    lay = result.layout
    if lay and lay.n_processes_fps > lay.one_process_fps:
        # Single-thread inferencers scale out better on this CPU: size the group in those.
        per_replica = lay.n_processes_fps / lay.threads
        replicas = math.ceil(target_fps / per_replica) if target_fps > 0 else lay.threads
        threads = 1
    lines = [
        "# from `framebus tune` " + result.machine["date"],
        "inferencer:",
        f"  replicas: {max(1, replicas)}",
        f"  maxBatch: {rec.max_batch}",
        f"  maxWaitMs: {rec.max_wait_ms:g}",
        f"  maxFrameAgeMs: {rec.max_frame_age_ms:g}",
    ]
    if threads:
        lines += [
            "  extraEnv:",
            "    - name: FRAMEBUS_INTRA_OP_THREADS",
            f'      value: "{threads}"',
        ]
    return "\n".join(lines) + "\n"


def write_outputs(result: TuneResult, settings: TuneSettings) -> dict[str, str]:
    """JSON, PNG plot and Helm snippet into the output directory; return their paths."""
    out = settings.output_dir
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "json": str(out / "tune.json"),
        "plot": str(out / "tune.png"),
        "helm": str(out / "tune-values.yaml"),
    }
    payload = {
        "machine": result.machine,
        "settings": {k: str(v) for k, v in asdict(settings).items()},
        "points": [asdict(p) for p in result.points],
        "recommendation": asdict(result.recommendation),
        "memory": {"measured": result.memory.kind, "note": result.memory.note},
        "layout": asdict(result.layout) | {"better": result.layout.better}
        if result.layout
        else None,
    }
    Path(files["json"]).write_text(json.dumps(payload, indent=2), encoding="utf-8")
    Path(files["helm"]).write_text(
        helm_snippet(result, settings.cameras * settings.fps), encoding="utf-8"
    )
    plot_curve(result, settings, Path(files["plot"]))
    return files


def plot_curve(result: TuneResult, settings: TuneSettings, path: Path) -> None:
    """Throughput and p99 latency against batch size, with the knee and the budget marked."""
    require_tools_extra("tune", "matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = [p.batch for p in result.points]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot(
        batches,
        [p.throughput_fps for p in result.points],
        "o-",
        color="tab:blue",
        label="throughput",
    )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("frames / s", color="tab:blue")
    ax.axvline(result.recommendation.knee_batch, color="grey", ls=":", label="knee")
    ax.axvline(result.recommendation.max_batch, color="tab:green", ls="--", label="recommended")
    if settings.cameras and settings.fps:
        ax.axhline(
            settings.cameras * settings.fps, color="tab:blue", ls="-.", lw=0.8, label="target load"
        )
    lat = ax.twinx()
    lat.plot(
        batches, [p.p99_ms for p in result.points], "s-", color="tab:red", label="p99 batch latency"
    )
    lat.axhline(
        0.6 * settings.latency_budget_ms, color="tab:red", ls="--", lw=0.8, label="compute budget"
    )
    lat.set_ylabel("p99 batch latency, ms", color="tab:red")
    handles = ax.get_legend_handles_labels()[0] + lat.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="upper left", fontsize=8)
    ax.set_title(f"framebus tune: {result.provider}, {result.machine['cpu'][:40]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
