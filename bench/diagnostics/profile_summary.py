"""Where an inferencer's time went, by pipeline thread, from a `py-spy record --format raw` file.

`python -m bench.capacity --profile FILE` writes such a file (one more drain of `framebus
inferencer`, not counted). Each line is a stack and its sample count; a stack belongs to the
receive, infer or publish thread by the stage's `run` frame in it (anything else: start-up and
the main thread, "other"). Prints the samples per thread, then the most frequent (thread,
innermost framebus function, innermost function) triples, so "the receive thread spent N of its
M samples in commit()" can be read off. A diagnostic: no baseline, no goal.

    .venv/bin/python -m bench.diagnostics.profile_summary FILE [--top 20]
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from bench.benchkit import command_line, parser_for

THREADS = {"Receiver.run": "receive", "Inference.run": "infer", "Publisher.run": "publish"}


def thread_of(frames: list[str]) -> str:
    """The pipeline thread a stack ran on, by its stage's run frame."""
    for frame in frames:
        for marker, name in THREADS.items():
            if marker in frame:
                return name
    return "other"


def function(frame: str) -> str:
    """`Class.method` of a py-spy frame `Class.method (file.py:line)`."""
    return frame.split(" (", maxsplit=1)[0]


def summarize(lines: list[str]) -> tuple[Counter[str], Counter[tuple[str, str, str]]]:
    """Samples per thread, and per (thread, innermost framebus function, innermost function)."""
    by_thread: Counter[str] = Counter()
    by_place: Counter[tuple[str, str, str]] = Counter()
    for line in lines:
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        frames = stack.split(";")
        thread = thread_of(frames)
        ours = [f for f in frames if "framebus" in f]
        by_thread[thread] += int(count)
        by_place[thread, function(ours[-1]) if ours else "-", function(frames[-1])] += int(count)
    return by_thread, by_place


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("file", type=Path, help="py-spy's raw output")
    parser.add_argument("--top", type=int, default=20, help="how many places to print")
    args = parser.parse_args()
    print("command:", command_line())
    by_thread, by_place = summarize(args.file.read_text().splitlines())
    print("samples by thread: " + ", ".join(f"{t} {n}" for t, n in by_thread.most_common()))
    for (thread, ours, leaf), n in by_place.most_common(args.top):
        print(f"{n:6d}  {thread:8s} {ours} -> {leaf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
