"""Motion gate: its CPU per frame against the decode it sits behind and the letterbox before it.

From one generated 1080p25 H.264 clip (a textured still scene that a square crosses), in
interleaved rounds on one process: PyAV's decode of every frame (CPU of all its threads, the
same-run baseline), the letterbox 1920x1080 -> 640x640 of each decoded frame (I420, the default,
and RGB), and the motion gate on each letterboxed picture (the I420 buffer's Y plane; the RGB
buffer's picture, made grey on the gate's grid). CPU time, ms per frame, medians of `--runs`
rounds, and the per-round ratios gate / decode and gate / letterbox.

No goal: the gate must cost little next to the decode a camera pays for anyway (docs/motion.md).

    .venv/bin/python -m bench.motion_gate [--runs 5] [--frames 50]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from bench.benchkit import U8, parser_for, print_header, print_median_ratio, ratios
from framebus.pixels import FrameFormat
from framebus_decoder.motion import MotionConfig, MotionGate
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.source import letterbox_frame
from framebus_tools.synthetic import write_h264

WIDTH, HEIGHT, FPS = 1920, 1080, 25


def scene(frames: int) -> Iterator[U8]:
    """A still textured picture with a 180 px square crossing it: a camera with some motion."""
    rng = np.random.default_rng(7)
    coarse = rng.integers(0, 255, (68, 120, 3), dtype=np.uint8)
    ground: U8 = np.asarray(cv2.resize(coarse, (WIDTH, HEIGHT), interpolation=cv2.INTER_CUBIC))
    for i in range(frames):
        img = ground.copy()
        x = (i * 37) % (WIDTH - 180)
        img[450:630, x : x + 180] = 230
        yield img


def cpu_ms_per_item(work: Callable[[Any], object], items: list[Any]) -> float:
    """CPU time of the whole process (every thread) per item, in ms."""
    started = time.process_time()
    for item in items:
        work(item)
    return (time.process_time() - started) * 1000 / len(items)


def decode_all(path: Path) -> list[Any]:
    """Every frame of the clip, decoded as the decoder does (FFmpeg's threading: auto)."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        return list(container.decode(stream))


def letterbox_round(frames: list[Any], buffer: LetterboxBuffer) -> float:
    """The letterbox's CPU per frame into one reused buffer."""
    return cpu_ms_per_item(lambda frame: letterbox_frame(frame, buffer), frames)


def gate_round(pictures: list[tuple[U8, float]]) -> float:
    """The gate's CPU per frame over the pictures, a fresh gate (first frame included)."""
    gate = MotionGate(MotionConfig())
    ts = iter(range(len(pictures)))
    return cpu_ms_per_item(lambda p: gate.check(p[0], p[1], next(ts) / 5), pictures)


def main() -> None:
    """Print the header, then the medians and ratios."""
    parser = parser_for(__doc__)
    parser.add_argument("--runs", type=int, default=5, help="rounds (median)")
    parser.add_argument("--frames", type=int, default=50, help="frames in the clip")
    args = parser.parse_args()
    print_header(provider=None)
    with tempfile.TemporaryDirectory() as tmp:
        clip = write_h264(Path(tmp) / "clip.mp4", WIDTH, HEIGHT, FPS, scene(args.frames))
        frames = decode_all(clip)
        buffers = {fmt: LetterboxBuffer(640, 640, fmt=fmt) for fmt in FrameFormat}
        pictures: dict[FrameFormat, list[tuple[U8, float]]] = {fmt: [] for fmt in FrameFormat}
        for frame in frames:
            for fmt, buffer in buffers.items():
                lb = letterbox_frame(frame, buffer)
                pictures[fmt].append((buffer.picture(lb).copy(), lb.scale))
        figures: dict[str, list[float]] = {}
        for _ in range(args.runs):
            started = time.process_time()
            decode_all(clip)
            rnd = {"decode": (time.process_time() - started) * 1000 / len(frames)}
            for fmt, buffer in buffers.items():
                rnd[f"letterbox {fmt.value}"] = letterbox_round(frames, buffer)
                rnd[f"gate {fmt.value}"] = gate_round(pictures[fmt])
            for name, value in rnd.items():
                figures.setdefault(name, []).append(value)
    print(f"{len(frames)} frames of {WIDTH}x{HEIGHT} H.264, {args.runs} rounds; CPU ms per frame:")
    for name, values in figures.items():
        print(f"  {name:<16} {statistics.median(values):7.3f}")
    for fmt in FrameFormat:
        gate = figures[f"gate {fmt.value}"]
        print_median_ratio(f"gate {fmt.value} / decode", ratios(gate, figures["decode"]))
        boxing = figures[f"letterbox {fmt.value}"]
        print_median_ratio(f"gate {fmt.value} / letterbox {fmt.value}", ratios(gate, boxing))


if __name__ == "__main__":
    main()
