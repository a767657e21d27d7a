"""Fetch buffer size against glibc's mmap ceiling: a bare consumer of 1.2 MB frames per setting.

librdkafka receives each fetch response into one buffer of up to `fetch.max.bytes`. glibc serves
an allocation above its mmap threshold (at most 32 MiB on 64-bit) with fresh mapped pages and
unmaps them on free, so a consumer whose responses are larger pays the kernel for zeroing every
page of every response. One topic is filled with N frame records (`bench/capacity.py`'s fill); then
for each repetition each setting, in turn, reads it all from the beginning in a fresh process
(`capacity.py --bare-consume`): frames/s, minor page faults and CPU seconds while consuming.
Figures are medians over the repetitions, and ratios against the first setting (the baseline:
what framebus configured before, 64 MiB per fetch, 16 MiB per partition).

The last default setting adds what the services do at start-up (`framebus.malloc`): a fixed mmap
threshold at glibc's ceiling and a high trim threshold, so freed record buffers stay in the heap.

    python bench/fetch_buffers.py [--frames 960] [--reps 4] [--settings 64/16,32/8,16/8,16/8+heap]
        [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import statistics
import sys

from capacity import (
    add_bootstrap_argument,
    bare_consume_process,
    delete_topics,
    fill_frames,
    fresh_topics,
    print_header,
)
from framebus.kafka.settings import KafkaSettings

MIB = 1024 * 1024
HEAP = "+heap"  # a setting's suffix: the consumer's process keeps freed heap (framebus.malloc)


def overrides(setting: str) -> dict[str, int]:
    """'64/16' -> fetch.max.bytes 64 MiB, max.partition.fetch.bytes 16 MiB ('+heap' aside)."""
    fetch_mib, partition_mib = (int(x) for x in setting.removesuffix(HEAP).split("/"))
    return {"fetch.max.bytes": fetch_mib * MIB, "max.partition.fetch.bytes": partition_mib * MIB}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=960)
    parser.add_argument("--cameras", type=int, default=16)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument(
        "--settings",
        default="64/16,32/8,16/8,16/8+heap",
        help="fetch/partition MiB[+heap], ...; +heap: glibc keeps freed heap (framebus.malloc)",
    )
    add_bootstrap_argument(parser)
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    settings = args.settings.split(",")
    print_header()
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in settings}
    names = fresh_topics(kafka, args.cameras)
    try:
        fill_frames(kafka, names.frames_topic, args.frames, args.cameras)
        for rep in range(args.reps):
            for setting in settings:
                got = bare_consume_process(
                    kafka,
                    names.frames_topic,
                    args.frames,
                    16,
                    overrides(setting),
                    keep_heap=setting.endswith(HEAP),
                )
                runs[setting].append(got)
                print(
                    f"rep {rep + 1} {setting:>11} MiB: {got['rate']:7.1f} f/s, "
                    f"{got['minflt']:7.0f} page faults, {got['cpu_s']:5.2f} CPU s, "
                    f"peak RSS {got['maxrss_mb']:.0f} MB",
                    flush=True,
                )
    finally:
        delete_topics(kafka, names)
    base = settings[0]
    print(f"\nmedians of {args.reps}, ratios against {base}:")
    for setting in settings:
        rate = statistics.median(r["rate"] for r in runs[setting])
        faults = statistics.median(r["minflt"] for r in runs[setting])
        cpu = statistics.median(r["cpu_s"] for r in runs[setting])
        rss = statistics.median(r["maxrss_mb"] for r in runs[setting])
        ratios = [a["rate"] / b["rate"] for a, b in zip(runs[setting], runs[base], strict=True)]
        print(
            f"{setting:>11} MiB: {rate:7.1f} f/s (x{statistics.median(ratios):.2f} per rep), "
            f"{faults:7.0f} page faults, {cpu:5.2f} CPU s per {args.frames} frames, "
            f"peak RSS {rss:.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
