"""The Kafka hop of a frame: produce() -> delivered, and produce() -> a consumer has it.

The floor under the fixed path of `bench.latency`: no decoder, no inferencer, only the project's
producer (with the decoder's librdkafka settings) sending frame-sized records at a real-time rate
to a fresh topic, keyed by camera as the decoder keys them, and the project's consumer (the
inferencer's fetch settings) reading them in a second process. Per record: the delivery latency
(produce() -> the broker's acknowledgement, from the delivery report) and the hop (produce() ->
the consumer's consume() returned it; the record's CreateTime is stamped at produce()). Each
repetition runs every setting once, in turn; medians of the repetitions' p50/p99, and the hop's
p50 against the first setting's in the same repetition. Settings are `linger=N` (the decoder
producer's linger.ms) and `size=B` (record bytes), `+`-joined; the default compares a 640x640x3
frame with a 1 KB record, the per-request floor. A diagnostic; no goal.

    .venv/bin/python -m bench.diagnostics.kafka_hop [--reps 3] [--seconds 15] [--rate 50]
        [--cameras 10] [--settings linger=0,linger=0+size=1000] [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from typing import Any

from bench.benchkit import (
    add_bootstrap_argument,
    delete_topics,
    fresh_topics,
    parser_for,
    print_header,
)
from framebus.kafka.consumer import Consumer
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus_decoder.service import producer_overrides
from framebus_decoder.settings import DecoderSettings
from framebus_tools.runstats import percentile

FRAME_BYTES = 640 * 640 * 3 + 100  # a letterboxed frame's tensor plus its record's fields
WARMUP_S = 3.0  # left out of each setting's figures: connections, first fetches


def parse_setting(text: str) -> tuple[int, int]:
    """'linger=0+size=1000' -> (linger.ms, record bytes)."""
    linger, size = 0, FRAME_BYTES
    for part in text.split("+"):
        key, _, value = part.partition("=")
        if key == "linger":
            linger = int(value)
        elif key == "size":
            size = int(value)
        else:
            raise SystemExit(f"unknown knob {part!r} in setting {text!r}")
    return linger, size


def receive(bootstrap: str, topic: str, seconds: float, out: Any) -> None:
    """Consumer process: the hop (receive time - CreateTime, ms) of every record it gets."""
    consumer = Consumer(KafkaSettings(bootstrap_servers=bootstrap), f"hop-{uuid.uuid4().hex}")
    consumer.subscribe([topic])
    hops: list[tuple[float, float]] = []  # (CreateTime ms, hop ms)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            # As the inferencer's receive loop: return on the first record, then take the rest.
            messages = consumer.consume(1, 0.1)
            if messages:
                messages += consumer.consume(63, 0)
            now_ms = time.time() * 1000
            for msg in messages:
                if msg.error() is None:
                    created = float(msg.timestamp()[1])
                    hops.append((created, now_ms - created))
    finally:
        consumer.close()
    out.put(hops)


def one_setting(kafka: KafkaSettings, args: argparse.Namespace, setting: str) -> dict[str, float]:
    """p50/p99 of delivery and hop for one setting, on a topic of its own."""
    linger, size = parse_setting(setting)
    names = fresh_topics(kafka, args.cameras, prefix="hop")
    settings = DecoderSettings(kafka=kafka, producer_linger_ms=linger)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    reader = context.Process(
        target=receive,
        args=(kafka.bootstrap_servers, names.frames_topic, args.seconds + 10, out),
    )
    reader.start()
    delivery: list[tuple[float, float]] = []
    try:
        time.sleep(4.0)  # the consumer joins its group before the first record

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                created = float(msg.timestamp()[1])
                delivery.append((created, time.time() * 1000 - created))

        value = os.urandom(size)
        with Producer(kafka, overrides=producer_overrides(settings)) as producer:
            producer.wait_ready(30)
            start = time.monotonic()
            sent = 0
            while time.monotonic() - start < args.seconds:
                producer.produce(
                    names.frames_topic, value, f"cam-{sent % args.cameras:03d}", None, delivered
                )
                sent += 1
                due = start + sent / args.rate
                while (left := due - time.monotonic()) > 0:
                    producer.poll(left)  # serves delivery reports while it waits
            producer.flush(30)
        hops = out.get(timeout=60)
    finally:
        reader.join(60)
        delete_topics(kafka, names)
    cutoff = (min(c for c, _ in delivery) if delivery else 0.0) + WARMUP_S * 1000
    steady_delivery = [ms for c, ms in delivery if c >= cutoff]
    steady_hops = [ms for c, ms in hops if c >= cutoff]
    if not steady_hops or not steady_delivery:
        raise SystemExit(f"{setting}: no records after warm-up ({len(hops)} received)")
    return {
        "delivery_p50": percentile(steady_delivery, 50),
        "delivery_p99": percentile(steady_delivery, 99),
        "hop_p50": percentile(steady_hops, 50),
        "hop_p99": percentile(steady_hops, 99),
        "records": float(len(steady_hops)),
    }


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--reps", type=int, default=3, help="repetitions (median)")
    parser.add_argument("--seconds", type=float, default=15.0, help="producing, per setting")
    parser.add_argument("--rate", type=float, default=50.0, help="records/s over all cameras")
    parser.add_argument("--cameras", type=int, default=10, help="keys (= partitions)")
    parser.add_argument(
        "--settings",
        default="linger=0,linger=0+size=1000",
        help="comma-separated, each linger=N and/or size=B joined by +; the first is the baseline",
    )
    add_bootstrap_argument(parser)
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    settings = args.settings.split(",")
    print_header()
    print(
        f"{args.rate:g} records/s over {args.cameras} keys and partitions, {args.seconds:g} s "
        f"per setting ({WARMUP_S:g} s left out), {args.reps} reps"
    )
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    for rep in range(args.reps):
        for setting in settings:
            got = one_setting(kafka, args, setting)
            runs[setting].append(got)
            print(
                f"rep {rep + 1} {setting:<24} delivery p50/p99 {got['delivery_p50']:6.1f} /"
                f" {got['delivery_p99']:6.1f} ms  hop p50/p99 {got['hop_p50']:6.1f} /"
                f" {got['hop_p99']:6.1f} ms  ({got['records']:.0f} records)",
                flush=True,
            )
    base = settings[0]
    print(f"\nmedians of {args.reps} reps, ms; ratios against {base} in the same rep:")
    for setting in settings:
        med = {k: statistics.median(r[k] for r in runs[setting]) for k in runs[setting][0]}
        ratio = statistics.median(
            a["hop_p50"] / b["hop_p50"] for a, b in zip(runs[setting], runs[base], strict=True)
        )
        print(
            f"{setting:<24} delivery p50/p99 {med['delivery_p50']:6.1f} / "
            f"{med['delivery_p99']:6.1f}  hop p50/p99 {med['hop_p50']:6.1f} / "
            f"{med['hop_p99']:6.1f}  hop p50 x{ratio:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
