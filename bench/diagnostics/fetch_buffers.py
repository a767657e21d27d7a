"""Fetch buffer size against glibc's mmap ceiling: a bare consumer of 1.2 MB frames per setting.

librdkafka receives each fetch response into one buffer of up to `fetch.max.bytes`. glibc serves
an allocation above its mmap threshold (at most 32 MiB on 64-bit) with fresh mapped pages and
unmaps them on free, so a consumer whose responses are larger pays the kernel for zeroing every
page of every response. `+heap` adds what the services do at start-up (`framebus.malloc`): a
fixed mmap threshold at glibc's ceiling and a high trim threshold, so freed record buffers stay
in the heap. One topic is filled with N frame records; then, for each repetition, each setting in
turn reads it all from the beginning in a fresh process: frames/s, minor page faults, CPU seconds
and peak RSS. Medians over the repetitions, and rates as ratios against the first setting (by
default framebus's own: 16 MiB per fetch, 8 MiB per partition, heap kept). A diagnostic for the
consumer's fetch settings; no goal.

    .venv/bin/python -m bench.diagnostics.fetch_buffers [--frames 960] [--reps 4]
        [--settings 16/8+heap,16/8,64/16+heap] [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from bench.benchkit import (
    Consumed,
    add_bootstrap_argument,
    bare_consume_process,
    delete_topics,
    fill_frames,
    fresh_topics,
    parser_for,
    print_header,
    ratios,
)
from framebus.kafka.settings import KafkaSettings

MIB = 1024 * 1024
HEAP = "+heap"  # a setting's suffix: the consumer's process keeps freed heap (framebus.malloc)


def overrides(setting: str) -> dict[str, int]:
    """'64/16' -> fetch.max.bytes 64 MiB, max.partition.fetch.bytes 16 MiB ('+heap' aside)."""
    fetch_mib, partition_mib = (int(x) for x in setting.removesuffix(HEAP).split("/"))
    return {"fetch.max.bytes": fetch_mib * MIB, "max.partition.fetch.bytes": partition_mib * MIB}


def read_each(
    kafka: KafkaSettings, topic: str, args: argparse.Namespace, settings: list[str]
) -> dict[str, list[Consumed]]:
    """Each setting reads the whole topic in a fresh process, in turn, `--reps` times."""
    runs: dict[str, list[Consumed]] = {s: [] for s in settings}
    for rep in range(args.reps):
        for setting in settings:
            got = bare_consume_process(
                kafka, topic, args.frames, 16, overrides(setting), keep_heap=setting.endswith(HEAP)
            )
            runs[setting].append(got)
            print(
                f"rep {rep + 1} {setting:>11} MiB: {got.rate:7.1f} f/s, {got.minflt:7d} page "
                f"faults, {got.cpu_s:5.2f} CPU s, peak RSS {got.maxrss_mb:.0f} MB",
                flush=True,
            )
    return runs


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--frames", type=int, default=960, help="frame records on the topic")
    parser.add_argument("--cameras", type=int, default=16, help="keys (= partitions)")
    parser.add_argument("--reps", type=int, default=4, help="repetitions (median)")
    parser.add_argument(
        "--settings",
        default="16/8+heap,16/8,64/16+heap",
        help="fetch/partition MiB[+heap], ...; +heap: glibc keeps freed heap (framebus.malloc); "
        "the first is the baseline",
    )
    add_bootstrap_argument(parser)
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    settings = args.settings.split(",")
    print_header()
    names = fresh_topics(kafka, args.cameras, prefix="fetch")
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        runs = read_each(kafka, names.frames_topic, args, settings)
    finally:
        delete_topics(kafka, names)
    base = [r.rate for r in runs[settings[0]]]
    print(f"\nmedians of {args.reps}, rates against {settings[0]} in the same rep:")
    for setting, got in runs.items():
        per_rep = ratios([r.rate for r in got], base)
        print(
            f"{setting:>11} MiB: {statistics.median(r.rate for r in got):7.1f} f/s "
            f"(x{statistics.median(per_rep):.2f}), "
            f"{statistics.median(r.minflt for r in got):7.0f} page faults, "
            f"{statistics.median(r.cpu_s for r in got):5.2f} CPU s per {args.frames} frames, "
            f"peak RSS {statistics.median(r.maxrss_mb for r in got):.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
