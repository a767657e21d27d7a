"""What framebus costs the local broker: per broker thread over a drain, and per request.

Two measurements against the embedded broker (`framebus kafka start`), reading its CPU from /proc
(so only a broker on this host). A diagnostic: it explains where `bench.capacity`'s broker cores
go; no goal.

- `threads`: each run fills a fresh frames topic (`bench.capacity`'s fill), reads it with the
  bare consumer (a fresh process) and drains it with `framebus inferencer` on the near-free model,
  as `bench.capacity` does. The broker's threads' CPU (`/proc/<pid>/task/*/stat`, sampled every
  50 ms, grouped by thread name) is cut at each window: the bare consumer's first to last batch,
  and framebus's first to last detections record. Printed in ms of broker CPU per frame counted,
  summed over the runs.
- `requests`: the broker's CPU per produce-and-flush of 16 small records spread over 16
  partitions, all in one partition, and per synchronous commit of 16 partitions' offsets, each
  repeated `--reps` times after 20 uncounted ones. librdkafka sends one ProduceRequest per
  partition (its issue #1700), so the first is 16 requests and the second one.

    .venv/bin/python -m bench.diagnostics.broker_cost threads [--runs 4] [--bootstrap 127.0.0.1:29092]
    .venv/bin/python -m bench.diagnostics.broker_cost requests [--reps 300]
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import onnx

from bench.benchkit import (
    CPU_SAMPLE_S,
    SIZE,
    TICK_S,
    add_bootstrap_argument,
    bare_consume_process,
    broker_pids,
    delete_topics,
    fill_frames,
    fresh_topics,
    inferencer_env,
    parser_for,
    print_header,
    read_detections,
    run_inferencer,
)
from framebus.codec import DetectionsCodec
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.topology import TopicSettings
from testkit.models import near_free_model

ThreadCpu = dict[str, float]  # CPU seconds per thread group
Snapshot = tuple[float, ThreadCpu]  # wall-clock s, and the CPU then


def thread_cpu(pid: int) -> ThreadCpu:
    """CPU seconds (user + system) of a process's threads, grouped by name less its number."""
    groups: ThreadCpu = defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        groups[re.sub(r"[-#\s]*\d+$", "", name)] += (int(fields[11]) + int(fields[12])) * TICK_S
    return groups


class Sampler:
    """The broker's per-thread CPU every CPU_SAMPLE_S, on a thread of its own."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[Snapshot] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), thread_cpu(self.pid)))
            self._stop.wait(CPU_SAMPLE_S)

    def between(self, t0: float, t1: float) -> ThreadCpu:
        """Each thread group's CPU seconds between the samples nearest t0 and t1."""
        first = min(self.samples, key=lambda s: abs(s[0] - t0))[1]
        last = min(self.samples, key=lambda s: abs(s[0] - t1))[1]
        return {k: v - first.get(k, 0.0) for k, v in last.items()}


def add_to(total: dict[str, float], more: ThreadCpu) -> None:
    """Add each thread group's CPU seconds in `more` to `total`."""
    for group, seconds in more.items():
        total[group] = total.get(group, 0.0) + seconds


def threads(args: argparse.Namespace, kafka: KafkaSettings) -> None:
    """Broker CPU per frame by thread group: the bare consumer's windows against framebus's."""
    cpu: dict[str, ThreadCpu] = {"bare": {}, "framebus": {}}
    frames = {"bare": 0, "framebus": 0}
    with tempfile.TemporaryDirectory() as tmp, Sampler(only_broker()) as sampler:
        model = Path(tmp) / "near-free.onnx"
        onnx.save(near_free_model(SIZE), str(model))
        for run in range(args.runs):
            names = fresh_topics(kafka, args.partitions, prefix="cost")
            try:
                fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
                os.sync()
                bare = bare_consume_process(
                    kafka, names.frames_topic, args.frames, args.max_batch, keep_heap=True
                )
                add_to(cpu["bare"], sampler.between(bare.first_wall_s, bare.last_wall_s))
                frames["bare"] += bare.frames
                counted, t0, t1 = drain(kafka, names, model, args, Path(tmp))
                add_to(cpu["framebus"], sampler.between(t0, t1))
                frames["framebus"] += counted
            finally:
                delete_topics(kafka, names)
            print(f"run {run + 1}: bare consumer, framebus drained", flush=True)
    print(f"\n{'broker thread group':32} {'bare ms/frame':>14} {'framebus ms/frame':>18}")
    per_frame = {side: {k: v * 1000 / frames[side] for k, v in cpu[side].items()} for side in cpu}
    for group in sorted(set(cpu["bare"]) | set(cpu["framebus"])):
        bare_ms, fb_ms = per_frame["bare"].get(group, 0.0), per_frame["framebus"].get(group, 0.0)
        if max(bare_ms, fb_ms) >= 0.002:
            print(f"{group:32} {bare_ms:14.3f} {fb_ms:18.3f}")
    totals = [sum(per_frame[side].values()) for side in ("bare", "framebus")]
    print(f"{'all':32} {totals[0]:14.3f} {totals[1]:18.3f}")


def drain(
    kafka: KafkaSettings,
    names: TopicSettings,
    model: Path,
    args: argparse.Namespace,
    workdir: Path,
) -> tuple[int, float, float]:
    """`framebus inferencer` drains the topic: frames counted and the window's ends (wall s)."""
    env = inferencer_env(kafka, names, model, args.max_batch)
    code, _usage = run_inferencer(env, workdir / f"{names.frames_topic}.log", None)
    if code:
        raise RuntimeError(f"the inferencer exited with {code}")
    codec = DetectionsCodec()
    dets = sorted(
        (m.timestamp()[1], codec.decode(m.value() or b"").batch_size)
        for m in read_detections(kafka, names.detections_topic, args.frames)
    )
    first_batch = max(1, dets[0][1])  # its records end the start-up, as in bench.capacity
    return len(dets) - first_batch, dets[0][0] / 1000, dets[-1][0] / 1000


def only_broker() -> int:
    """The one local broker's pid (this measures a broker on this host)."""
    pids = broker_pids()
    if len(pids) != 1:
        raise SystemExit(f"expected one local broker (framebus kafka start), found {len(pids)}")
    return pids[0]


def requests(args: argparse.Namespace, kafka: KafkaSettings) -> None:
    """The broker's CPU per produce-and-flush and per synchronous commit."""
    broker = only_broker()
    names = fresh_topics(kafka, 16, prefix="cost")
    topic = names.detections_topic
    try:
        producer = confluent_kafka.Producer(Producer(kafka).config)  # raw: the bare cost

        def produce(partitions: int, per_partition: int) -> Callable[[int], None]:
            def once(_i: int) -> None:
                for p in range(partitions):
                    for _ in range(per_partition):
                        producer.produce(topic, b"x" * 100, partition=p)
                producer.flush(10)

            return once

        group = f"broker-cost-{uuid.uuid4().hex[:8]}"
        consumer = confluent_kafka.Consumer(
            {**kafka.client_config(), "group.id": group, "enable.auto.commit": False}
        )

        def commit(i: int) -> None:
            offsets = [confluent_kafka.TopicPartition(topic, p, i + 1) for p in range(16)]
            consumer.commit(offsets=offsets, asynchronous=False)

        for label, step in (
            ("produce 16 records to 16 partitions, flush", produce(16, 1)),
            ("produce 16 records to 1 partition, flush", produce(1, 16)),
            ("commit 16 partitions, synchronous", commit),
        ):
            for i in range(20):  # uncounted
                step(i)
            before, t0 = sum(thread_cpu(broker).values()), time.perf_counter()
            for i in range(args.reps):
                step(20 + i)
            wall = (time.perf_counter() - t0) / args.reps * 1000
            broker_ms = (sum(thread_cpu(broker).values()) - before) / args.reps * 1000
            print(f"{label:46} {wall:6.2f} ms each, broker CPU {broker_ms:5.2f} ms each")
        consumer.close()
        producer.close()
    finally:
        delete_topics(kafka, names)


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("what", choices=("threads", "requests"))
    parser.add_argument("--runs", type=int, default=4, help="threads: runs, summed")
    parser.add_argument("--frames", type=int, default=960)
    parser.add_argument("--cameras", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--reps", type=int, default=300, help="requests: counted repetitions")
    add_bootstrap_argument(parser)
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    print_header()
    if args.what == "threads":
        threads(args, kafka)
    else:
        requests(args, kafka)


if __name__ == "__main__":
    main()
