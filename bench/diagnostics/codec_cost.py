"""The CPU of framebus's codecs a frame record, timed alone: the codec part of `bench.marginal`'s
relay floor.

On 256 I420 frame records as the decoder writes them (16 cameras, 640x640): `FrameCodec.
decode_view` alone, then decode, a `Detections` with no boxes and `DetectionsCodec.encode`, as
the relay floor does; each the median of `--reps` passes, thread CPU a record. A diagnostic: no
baseline ratio, no goal.

    .venv/bin/python -m bench.diagnostics.codec_cost [--reps 15]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

from bench.benchkit import SIZE, encode_frame, no_boxes, parser_for, print_header
from framebus.codec import DetectionsCodec, FrameCodec
from framebus.messages import PixelFormat
from framebus_decoder.wire import FrameEncoder

RECORDS = 256


def per_record_us(step: Callable[[], None], reps: int) -> float:
    """The median over `reps` passes of `step`'s thread CPU, a record, in µs."""
    passes = []
    for _ in range(reps):
        t0 = time.thread_time()
        step()
        passes.append((time.thread_time() - t0) / RECORDS * 1e6)
    return statistics.median(passes)


def main() -> None:
    """Time the two steps and print them."""
    parser = parser_for(__doc__)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    print_header(None)
    encoder, frames, results = FrameEncoder(), FrameCodec(), DetectionsCodec()
    pixels = np.zeros((SIZE, SIZE, 3), np.uint8)
    records = [
        encode_frame(encoder, f"cam-{i % 16:02d}", i, pixels, pixel_format=PixelFormat.I420)
        for i in range(RECORDS)
    ]

    def decode() -> None:
        for record in records:
            frames.decode_view(record)

    def answer() -> None:
        for offset, record in enumerate(records):
            frame = frames.decode_view(record)
            results.encode(no_boxes(frame, 16, 0, offset))

    decoded = per_record_us(decode, args.reps)
    both = per_record_us(answer, args.reps)
    print(f"FrameCodec.decode_view: {decoded:.1f} µs a record")
    print(f"decode, Detections and DetectionsCodec.encode: {both:.1f} µs a record")


if __name__ == "__main__":
    main()
