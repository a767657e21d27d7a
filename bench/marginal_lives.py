"""The processes `bench.marginal` measures, each from its start to its exit, as a `Life`.

A bare consumer (`bare_life`, also staging or relaying), N relays on their shares of the
partitions (`relays_life`), and `framebus inferencer` (`framebus_life`, its detections checked
and its engine's CPU read from its exit lines), each with its CPU, the broker's over its life and
its wall time; the broker's idle CPU; and the frame formats the inferencer's setting offers.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.benchkit import (
    bare_consume_process,
    bare_consume_processes,
    broker_pids,
    host_usage,
    inferencer_env,
    read_detections,
    run_inferencer,
    split_shares,
    usage_between,
)
from framebus.codec import DetectionsCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus.topology import TopicSettings
from framebus_inferencer.settings import InferencerSettings

EXIT_LINE = "CPU seconds at exit"  # the inferencer's last log line (framebus_inferencer.service)
RGB = "rgb"  # today's records, what the bare consumer always reads


def frame_formats() -> tuple[str, ...]:
    """The values of the inferencer's `frame_format` setting; (rgb,) where it has none."""
    fields = {f.name: f for f in dataclasses.fields(InferencerSettings)}
    if "frame_format" not in fields:
        return (RGB,)
    default: Any = fields["frame_format"].default  # an enum member: its class lists the formats
    return tuple(member.value for member in type(default))


@dataclass(frozen=True)
class Life:
    """One process draining one topic, from its start to its exit."""

    frames: int
    cpu_s: float  # the process's whole CPU
    engine_s: float  # of which inside the engine's run calls (0 for the bare consumer)
    broker_s: float  # the local broker's CPU over the process's life
    window_cpu_s: float  # its CPU between its first and last batch (bench.capacity's window)
    window_frames: int  # the frames after the first batch
    before_s: float  # its CPU before the first batch's records (nan: not sampled)
    wall_s: float = float("nan")  # from its start to its exit


def children_cpu_s() -> float:
    """User + system CPU of this process's reaped children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bare_life(
    kafka: KafkaSettings,
    topic: str,
    frames: int,
    batch: int,
    stage: bool = False,
    relay: str | None = None,
) -> Life:
    """A well-configured bare consumer (16 MiB fetches, heap kept) reading the topic, in a process.

    `stage`: it also copies each record into a row of a batch buffer; `relay`: it also answers
    each record with a detections record on that topic (`bare_consume`).
    """
    brokers = broker_pids(kafka.bootstrap_servers)
    cpu0, (_, broker0), wall0 = children_cpu_s(), host_usage(brokers), time.monotonic()
    got = bare_consume_process(
        kafka, topic, frames, batch, keep_heap=True, stage=stage, relay=relay
    )
    cpu1, (_, broker1), wall = children_cpu_s(), host_usage(brokers), time.monotonic() - wall0
    nan = float("nan")
    return Life(frames, cpu1 - cpu0, 0.0, broker1 - broker0, got.cpu_s, got.frames, nan, wall)


def relays_life(
    kafka: KafkaSettings, topic: str, frames: int, batch: int, relay: str, n: int
) -> Life:
    """`n` relay consumers at once, each in its own process on its share of the partitions.

    The floor of `--workers n`: what these libraries cost `n` processes splitting the frames
    (each its own clients, threads, fetches and produce requests), without a group's rebalances.
    """
    brokers = broker_pids(kafka.bootstrap_servers)
    shares = split_shares(kafka, topic, n)
    if sum(share for _, share in shares) != frames:
        raise RuntimeError(f"{topic}: {shares} is not {frames} records")
    cpu0, (_, broker0), wall0 = children_cpu_s(), host_usage(brokers), time.monotonic()
    got = bare_consume_processes(kafka, topic, shares, batch, keep_heap=True, relay=relay)
    cpu1, (_, broker1), wall = children_cpu_s(), host_usage(brokers), time.monotonic() - wall0
    nan = float("nan")
    window_cpu_s, window_frames = sum(g.cpu_s for g in got), sum(g.frames for g in got)
    return Life(frames, cpu1 - cpu0, 0.0, broker1 - broker0, window_cpu_s, window_frames, nan, wall)


def engine_cpu_at_exit(log_path: Path) -> float:
    """The engine's CPU seconds from the inferencer's exit lines (one a worker process)."""
    lines = [
        json.loads(line)
        for line in log_path.read_text(errors="replace").splitlines()
        if EXIT_LINE in line
    ]
    if not lines:
        raise RuntimeError(f"no '{EXIT_LINE}' line in {log_path}")
    return sum(float(line.get("engine_cpu_s", 0.0)) for line in lines)


def framebus_life(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    args: argparse.Namespace,
    frames: int,
    workers: int = 1,
) -> Life:
    """`framebus inferencer` draining the topic until it stops on idle; its detections checked.

    `workers` > 1: as `--workers N`, the supervisor and its workers (their CPU is the reaped
    supervisor's children's, their engine CPU the sum of each worker's exit line).
    """
    log_path = Path(args.workdir) / f"inferencer-{names.detections_topic}.log"
    env = {**inferencer_env(kafka, names, model, args.max_batch), "FRAMEBUS_LOG_LEVEL": "info"}
    if workers > 1:
        env["FRAMEBUS_WORKERS"] = str(workers)
    if len(frame_formats()) > 1:  # the inferencer has the setting: the graph takes these records
        env["FRAMEBUS_FRAME_FORMAT"] = args.frame_format
    env["FRAMEBUS_CANDIDATE_SELECTION"] = args.candidate_selection
    brokers = broker_pids(kafka.bootstrap_servers)
    cpu0, (_, broker0), wall0 = children_cpu_s(), host_usage(brokers), time.monotonic()
    code, samples = run_inferencer(env, log_path)
    cpu1, (_, broker1), wall = children_cpu_s(), host_usage(brokers), time.monotonic() - wall0
    if code:
        raise RuntimeError(f"inferencer exit code {code}; log {log_path}:\n{log_path.read_text()}")
    codec = DetectionsCodec()
    dets = sorted(
        (
            (m.timestamp()[1], codec.decode(m.value() or b""))
            for m in read_detections(kafka, names.detections_topic, frames)
        ),
        key=lambda timed: timed[0],  # a batch's records share a timestamp
    )
    statuses = Counter(d.status for _, d in dets)
    if (
        statuses != {FrameStatus.INFERRED: frames}
        or len({(d.camera_id, d.seq) for _, d in dets}) != frames
    ):
        # The log goes with the run's temporary directory: its tail is the evidence.
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-60:])
        raise RuntimeError(f"{frames} frames: detections {dict(statuses)}; log {log_path}:\n{tail}")
    # As bench.capacity: the first batch's records end the start-up; later records are frames.
    first_ms, last_ms = dets[0][0], dets[-1][0]
    window_cpu_s = usage_between(samples, first_ms / 1000, last_ms / 1000)[0]
    before_s = usage_between(samples, samples[0][0], first_ms / 1000)[0] + samples[0][1]
    return Life(
        frames,
        cpu1 - cpu0,
        engine_cpu_at_exit(log_path),
        broker1 - broker0,
        window_cpu_s,
        frames - max(1, dets[0][1].batch_size),
        before_s,
        wall,
    )


IDLE_WINDOW_S = 3.0  # the broker's CPU read with nothing else running, once a run


def broker_idle_ms_per_s(kafka: KafkaSettings) -> float:
    """The local broker's CPU over IDLE_WINDOW_S with no client running: ms a second."""
    brokers = broker_pids(kafka.bootstrap_servers)
    before = host_usage(brokers)[1]
    time.sleep(IDLE_WINDOW_S)
    return (host_usage(brokers)[1] - before) * 1000 / IDLE_WINDOW_S
