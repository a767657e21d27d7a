"""`bench.capacity`'s inferencer side: `framebus inferencer` draining a fresh topic of frames
against a bare consumer of the same records before and after it, each drain's figures read back
from its detections topic and its CPU samples (`Drain`), and the optional drain under py-spy."""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import onnx

from bench.benchkit import (
    SIZE,
    Consumed,
    UsageSamples,
    bare_consume_process,
    delete_topics,
    fill_frames,
    fresh_topics,
    inferencer_env,
    others_cores,
    read_detections,
    run_inferencer,
    usage_between,
)
from bench.capacity_report import Side, warm_up_label
from framebus.codec import DetectionsCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus.topology import TopicSettings
from testkit.models import near_free_model


@dataclass(frozen=True)
class Drain:
    """What one `framebus inferencer` drain did, read back from its detections topic."""

    rate: float
    records: int
    by_status: dict[str, int]
    distinct_frames: int
    boxes: int
    exit_code: int
    cpu_ms_per_frame: float  # the inferencer process's, over the rate's window (nan: unknown)
    faults_per_frame: float  # its minor page faults per frame, over the same window
    mean_batch: float  # frames per inference batch, averaged over the frames
    longest_gap_ms: float  # the longest time between two batches' records: a stall, if long
    broker_cores: float  # the local broker's CPU over the rate's window, in cores
    rest_cores: float  # the host's other busy CPU (neither the inferencer nor the broker)

    def note(self, frames: int) -> str:
        """'' when every frame has exactly one INFERRED record and no box, else what is wrong."""
        problems = []
        if self.exit_code:
            problems.append(f"inferencer exit code {self.exit_code}")
        if self.by_status.get(FrameStatus.INFERRED.value, 0) != frames:
            problems.append(f"statuses {self.by_status} for {frames} frames")
        if self.distinct_frames != frames or self.records != frames:
            problems.append(f"{self.records} records for {self.distinct_frames} distinct frames")
        if self.boxes:
            problems.append(f"{self.boxes} boxes from an all-zero head")
        return "; ".join(problems)


def framebus_drain(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    args: argparse.Namespace,
    workdir: Path,
    profile: Path | None = None,
) -> Drain:
    """`framebus inferencer` draining the topic; frames/s from its detections' timestamps."""
    log_path = workdir / f"inferencer-{names.frames_topic}.log"
    env = inferencer_env(kafka, names, model, args.max_batch)
    code, usage = run_inferencer(env, log_path, profile)
    return drain_figures(kafka, names, args, log_path, code, usage)


def drain_figures(
    kafka: KafkaSettings,
    names: TopicSettings,
    args: argparse.Namespace,
    log_path: Path,
    code: int,
    usage: UsageSamples,
) -> Drain:
    """A drain's figures from its detections topic and its CPU samples."""
    codec = DetectionsCodec()
    messages = read_detections(kafka, names.detections_topic, args.frames)
    dets = sorted(
        ((m.timestamp()[1], codec.decode(m.value())) for m in messages), key=lambda d: d[0]
    )
    if not dets:
        raise RuntimeError(f"no detections; inferencer log {log_path}:\n{log_path.read_text()}")
    by_status: dict[str, int] = {}
    for _, d in dets:
        by_status[d.status.value] = by_status.get(d.status.value, 0) + 1
    # CreateTime is set when the publish thread produces a record: the first batch's records
    # mark the end of start-up and of the first batch; each later record is one frame through.
    first_ms, last_ms = dets[0][0], dets[-1][0]
    span_s = max(last_ms - first_ms, 1) / 1000
    counted = len(dets) - max(1, dets[0][1].batch_size)
    cpu_s, faults, host_s, broker_s = usage_between(usage, first_ms / 1000, last_ms / 1000)
    broker_cores, rest_cores = others_cores(host_s, cpu_s, broker_s, span_s)
    return Drain(
        rate=counted / span_s,
        records=len(dets),
        by_status=by_status,
        distinct_frames=len({(d.camera_id, d.seq) for _, d in dets}),
        boxes=sum(len(d.boxes) for _, d in dets),
        exit_code=code,
        cpu_ms_per_frame=cpu_s * 1000 / counted,
        faults_per_frame=faults / counted,
        mean_batch=statistics.fmean(d.batch_size for _, d in dets),
        longest_gap_ms=max((b[0] - a[0] for a, b in itertools.pairwise(dets)), default=0),
        broker_cores=broker_cores,
        rest_cores=rest_cores,
    )


def inferencer_run(
    args: argparse.Namespace, kafka: KafkaSettings, model: Path, workdir: Path
) -> tuple[tuple[Consumed, Consumed], Drain]:
    """One run on a fresh topic: fill it; bare consumer, framebus drain, bare consumer again.

    The baseline before and after the drain, averaged, cancels a linear drift of the machine's
    speed (other jobs starting or ending) that one fixed order would book to either side.
    """
    names = fresh_topics(kafka, args.partitions, prefix="cap")
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        # The kernel writes the fill's 1.2 GB back about 30 s later, inside some later drain,
        # unless it is written now.
        os.sync()

        def bare() -> Consumed:
            return bare_consume_process(
                kafka, names.frames_topic, args.frames, args.max_batch, keep_heap=True
            )

        before = bare()
        result = framebus_drain(kafka, names, model, args, workdir)
        after = bare()
    finally:
        delete_topics(kafka, names)
    return (before, after), result


def record_inferencer_run(side: Side, before: Consumed, after: Consumed, result: Drain) -> float:
    """Add one counted run's figures to `side`; return the baseline's rate (mean of the two)."""
    base = (before.rate + after.rate) / 2
    side.base.append(base)
    side.framebus.append(result.rate)
    side.base_cpu.append((before.cpu_ms_per_frame + after.cpu_ms_per_frame) / 2)
    side.framebus_cpu.append(result.cpu_ms_per_frame)
    side.base_faults.append((before.faults_per_frame + after.faults_per_frame) / 2)
    side.framebus_faults.append(result.faults_per_frame)
    side.framebus_gaps_ms.append(result.longest_gap_ms)
    (broker_b, rest_b), (broker_a, rest_a) = before.others(), after.others()
    side.base_broker.append((broker_b + broker_a) / 2)
    side.base_rest.append((rest_b + rest_a) / 2)
    side.framebus_broker.append(result.broker_cores)
    side.framebus_rest.append(result.rest_cores)
    return base


def inferencer_side(args: argparse.Namespace, kafka: KafkaSettings, workdir: Path) -> Side:
    """`--warm-up` + `--runs` runs of `inferencer_run`; print each run's figures."""
    model = workdir / "near-free-640.onnx"
    onnx.save(near_free_model(SIZE), str(model))
    side = Side()
    print(
        f"\n== inferencer side: {args.frames} frames from {args.cameras} cameras, "
        f"max_batch {args.max_batch}, {args.partitions} partitions, near-free engine"
    )
    print(
        f"{'run':>3} {'bare consumer f/s (before/after)':>33} {'framebus f/s':>13} {'ratio':>6}"
        f" {'CPU ms/frame bare, framebus':>28} {'faults/frame':>13} {'batch':>5} {'gap ms':>6}"
        f" {'broker cores':>12} {'rest cores':>11}  check"
    )
    for run in range(-args.warm_up, args.runs):
        (before, after), result = inferencer_run(args, kafka, model, workdir)
        if run < 0:
            base = (before.rate + after.rate) / 2
            print(
                f"{warm_up_label(run, args.warm_up):>3} {base:>33.1f} {result.rate:>13.1f} "
                f"{result.rate / base:>6.2f}  warm-up, not counted",
                flush=True,
            )
            continue
        base = record_inferencer_run(side, before, after, result)
        note = result.note(args.frames)
        side.notes.append(note)
        rates = f"{base:.1f} ({before.rate:.1f}/{after.rate:.1f})"
        cpu = f"{side.base_cpu[-1]:.2f}, {result.cpu_ms_per_frame:.2f}"
        faults = f"{side.base_faults[-1]:.0f}, {result.faults_per_frame:.0f}"
        broker = f"{side.base_broker[-1]:.2f}, {result.broker_cores:.2f}"
        rest = f"{side.base_rest[-1]:.2f}, {result.rest_cores:.2f}"
        print(
            f"{run + 1:>3} {rates:>33} {result.rate:>13.1f} {result.rate / base:>6.2f} {cpu:>28}"
            f" {faults:>13} {result.mean_batch:>5.1f} {result.longest_gap_ms:>6.0f} {broker:>12}"
            f" {rest:>11}  {note or f'{result.records} records, all INFERRED, 0 boxes'}",
            flush=True,
        )
    if args.profile:
        profile_drain(args, kafka, model, workdir)
    return side


def profile_drain(
    args: argparse.Namespace, kafka: KafkaSettings, model: Path, workdir: Path
) -> None:
    """One more drain under py-spy (not counted): where the inferencer's time goes.

    Summarise the file with `python -m bench.diagnostics.profile_summary FILE`.
    """
    names = fresh_topics(kafka, args.partitions, prefix="cap")
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        result = framebus_drain(kafka, names, model, args, workdir, profile=args.profile)
    finally:
        delete_topics(kafka, names)
    print(f"profiled drain (py-spy, not counted): {result.rate:.1f} f/s -> {args.profile}")
