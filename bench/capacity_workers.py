"""`bench.capacity --workers N`: `framebus inferencer` as one process and as a supervisor of N
workers, taking turns on fresh topics, each ready (every worker holding partitions) before the
frames are produced; the CPU per frame of the whole process tree of each, and its summary
against the workers goal."""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx
from confluent_kafka.admin import AdminClient

from bench.benchkit import (
    CPU_SAMPLE_S,
    SIZE,
    UsageSamples,
    broker_pids,
    delete_topics,
    fill_frames,
    fresh_topics,
    host_usage,
    inferencer_env,
    process_tree_usage,
    ratios,
)
from bench.capacity_inferencer import Drain, drain_figures
from bench.capacity_report import median_of, warm_up_label
from framebus.kafka.settings import KafkaSettings
from framebus.topology import TopicSettings
from framebus_tools.perf.loadtest import end_offsets
from framebus_tools.process import ServiceProcess, free_port
from testkit.models import near_free_model

WORKERS_GOAL = 1.00  # --workers N: their CPU per frame together / one process's, at most


def ready_drain(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    args: argparse.Namespace,
    workers: int,
    workdir: Path,
) -> Drain:
    """`framebus inferencer --workers <workers>`, every worker ready, drains frames as they come.

    Ready (and every worker holding partitions) first: the supervisor starts its workers one
    after another, so on a topic filled beforehand worker 0 would drain most of it alone. CPU and faults are the whole process
    tree's (the supervisor and its workers; with 1 worker, the one process).
    """
    log_path = workdir / f"inferencer-{names.frames_topic}-w{workers}.log"
    env = {
        **inferencer_env(kafka, names, model, args.max_batch),
        "FRAMEBUS_WORKERS": str(workers),
        "FRAMEBUS_MAX_WAIT_MS": str(args.max_wait_ms),
        "FRAMEBUS_HTTP_PORT": str(free_port()),
        "FRAMEBUS_STOP_AFTER_IDLE_S": "0",  # stopped below, once every record is out
    }
    proc = ServiceProcess("inferencer", env, log_path)
    samples: UsageSamples = []
    brokers, done = broker_pids(kafka.bootstrap_servers), threading.Event()

    def sample() -> None:
        while not done.is_set():
            usage = process_tree_usage(proc.pid)
            if usage is not None:
                samples.append((time.time(), *usage, *host_usage(brokers)))
            time.sleep(CPU_SAMPLE_S)

    sampler = threading.Thread(target=sample, name="cpu-sampler", daemon=True)
    try:
        if proc.wait_ready(300) is None:
            raise RuntimeError(f"inferencer not ready; log {log_path}:\n{proc.text()[-3000:]}")
        wait_for_members(kafka, env["FRAMEBUS_CONSUMER_GROUP"], workers)
        sampler.start()
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        deadline = time.monotonic() + 300
        while end_offsets(kafka, names.detections_topic) < args.frames:
            if time.monotonic() > deadline or not proc.alive():
                raise RuntimeError(f"drain incomplete; log {log_path}:\n{proc.text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(0.5)  # samples past the last record's timestamp
        code = proc.stop(60)
    finally:
        done.set()
        proc.stop()
    return drain_figures(kafka, names, args, log_path, code, samples)


def wait_for_members(kafka: KafkaSettings, group: str, members: int, timeout_s: float = 60) -> None:
    """Until `group` has `members` members, each holding partitions.

    A worker is ready once it has joined; with the cooperative assignor the partitions it takes
    from the others come one rebalance later.
    """
    admin = AdminClient(kafka.client_config())
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described = admin.describe_consumer_groups([group])[group].result(10)
        held = [len(m.assignment.topic_partitions) for m in described.members]
        if len(held) == members and all(held):
            return
        time.sleep(0.2)
    raise RuntimeError(f"group {group}: not {members} members holding partitions in {timeout_s} s")


@dataclass
class WorkersSide:
    """Per-run figures of one process and of N workers, in the same runs."""

    workers: int
    rate: dict[int, list[float]] = field(default_factory=dict)  # workers -> f/s per run
    cpu: dict[int, list[float]] = field(default_factory=dict)  # workers -> CPU ms per frame
    faults: dict[int, list[float]] = field(default_factory=dict)  # minor page faults per frame
    batch: dict[int, list[float]] = field(default_factory=dict)
    broker: dict[int, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, workers: int, drain: Drain) -> None:
        """Record one counted drain."""
        for series, value in (
            (self.rate, drain.rate),
            (self.cpu, drain.cpu_ms_per_frame),
            (self.faults, drain.faults_per_frame),
            (self.batch, drain.mean_batch),
            (self.broker, drain.broker_cores),
        ):
            series.setdefault(workers, []).append(value)


def workers_side(args: argparse.Namespace, kafka: KafkaSettings, workdir: Path) -> WorkersSide:
    """`--warm-up` + `--runs` runs: 1 worker and `--workers` N, taking turns on fresh topics."""
    model = workdir / "near-free-640.onnx"
    onnx.save(near_free_model(SIZE), str(model))
    n = args.workers
    side = WorkersSide(n)
    print(
        f"\n== workers: 1 against {n}, {args.frames} frames from {args.cameras} cameras per "
        f"drain, max_batch {args.max_batch}, {args.partitions} partitions, near-free engine; "
        "every worker ready before the frames are produced"
    )
    print(
        f"{'run':>3} {'order':>6} {'f/s 1, N':>16} {'CPU ms/frame 1, N':>18} {'N/1':>5}"
        f" {'batch 1, N':>11} {'broker cores 1, N':>18}  check"
    )
    for run in range(-args.warm_up, args.runs):
        order = (1, n) if run % 2 == 0 else (n, 1)
        drains: dict[int, Drain] = {}
        for workers in order:
            names = fresh_topics(kafka, args.partitions, prefix="capw")
            try:
                drains[workers] = ready_drain(kafka, names, model, args, workers, workdir)
            finally:
                delete_topics(kafka, names)
        one, many = drains[1], drains[n]
        note = "; ".join(
            f"{w}: {d.note(args.frames)}" for w, d in drains.items() if d.note(args.frames)
        )
        label = warm_up_label(run, args.warm_up) if run < 0 else str(run + 1)
        if run >= 0:
            side.add(1, one)
            side.add(n, many)
            side.notes.append(note)
        print(
            f"{label:>3} {'-'.join(map(str, order)):>6} {f'{one.rate:.0f}, {many.rate:.0f}':>16}"
            f" {f'{one.cpu_ms_per_frame:.3f}, {many.cpu_ms_per_frame:.3f}':>18}"
            f" {many.cpu_ms_per_frame / one.cpu_ms_per_frame:>5.2f}"
            f" {f'{one.mean_batch:.1f}, {many.mean_batch:.1f}':>11}"
            f" {f'{one.broker_cores:.2f}, {many.broker_cores:.2f}':>18}"
            f"  {'warm-up, not counted' if run < 0 else note or 'every frame one INFERRED record'}",
            flush=True,
        )
    return side


def workers_summary(side: WorkersSide) -> dict[str, Any]:
    """Print and return the medians of the workers comparison."""
    n = side.workers
    per_run = ratios(side.cpu[n], side.cpu[1])
    print(
        f"workers: median CPU per frame, 1 worker {median_of(side.cpu[1]):.3f} ms, {n} workers "
        f"together {median_of(side.cpu[n]):.3f} ms (the whole process tree, over the drain's "
        f"window); median of the per-run ratios {n}/1: {median_of(per_run):.2f} "
        f"(runs: {', '.join(f'{r:.2f}' for r in per_run)}); goal <= {WORKERS_GOAL:.2f}: "
        f"{'met' if median_of(per_run) <= WORKERS_GOAL else 'missed'}"
    )
    print(
        f"workers: median f/s {median_of(side.rate[1]):.0f} and {median_of(side.rate[n]):.0f} "
        "(bounded by the fill, which runs alongside); median batch "
        f"{median_of(side.batch[1]):.1f} and {median_of(side.batch[n]):.1f}; median minor faults "
        f"per frame {median_of(side.faults[1]):.0f} and {median_of(side.faults[n]):.0f}"
    )
    return {
        "workers": n,
        "cpu_ms_per_frame": side.cpu,
        "faults_per_frame": side.faults,
        "fps": side.rate,
        "mean_batch": side.batch,
        "broker_cores": side.broker,
        "cpu_ratios": per_run,
        "median_cpu_ratio": median_of(per_run),
        "goal": WORKERS_GOAL,
        "goal_met": median_of(per_run) <= WORKERS_GOAL,
        "notes": side.notes,
    }
