"""Decoder: PyAV decode-only against framebus's decode + sample + letterbox + publish to Kafka.

From one generated 1080p25 H.264 file, in interleaved runs: PyAV decode-only fps (the same-run
baseline) and framebus's decoder (`service.run`, one camera, sampling at target_fps 5, every
sampled frame letterboxed and published to a fresh topic on a real broker, first decoded frame to
last delivery), and their ratio; the same with every frame published (the worst case). Then, without
a broker: the letterbox 1920x1080 -> 640x640 against its alternatives on one thread, the kept
path's CPU per frame with 16 threads letterboxing at once (a decoder's cameras), the bytes on the
wire and CPU of each compression choice, and how many 1080p25 cameras one core decodes at
target_fps 5. `--letterbox-only` prints just the letterbox figures (no broker needed).

Goal: framebus / PyAV decode-only >= 0.80 at target_fps 5 (median of the per-run ratios).

    .venv/bin/python -m bench.decoder [--runs 3] [--frames 250] [--bootstrap 127.0.0.1:29092]
    .venv/bin/python -m bench.decoder --letterbox-only [--letterbox-threads 16]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from bench.benchkit import (
    U8,
    add_bootstrap_argument,
    delete_topics,
    fresh_topics,
    parser_for,
    print_header,
    print_median_ratio,
)
from framebus.compression import compress, decompress
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Compression, TensorLayout
from framebus_decoder import service
from framebus_decoder.preprocess import LetterboxBuffer
from framebus_decoder.settings import DecoderSettings, DecodeThreading
from framebus_decoder.source import letterbox_frame
from framebus_decoder.stats import DecoderStats
from framebus_decoder.wire import FrameEncoder

GOAL = 0.80


def write_textured_video(path: Path, frames: int) -> Path:
    """1080p25 H.264 of a panning textured scene: decodes and compresses like a real camera."""
    rng = np.random.default_rng(7)
    coarse = rng.integers(0, 255, (68, 120, 3), dtype=np.uint8)
    texture: U8 = np.asarray(cv2.resize(coarse, (3840, 2176), interpolation=cv2.INTER_CUBIC))
    noise: U8 = rng.integers(0, 24, size=texture.shape, dtype=np.uint8)
    texture = np.asarray(cv2.add(texture, noise), np.uint8)  # saturating, as a camera's noise
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=25)
        stream.width, stream.height, stream.pix_fmt = 1920, 1080, "yuv420p"
        stream.options = {"crf": "23", "preset": "veryfast", "g": "50"}
        for i in range(frames):
            x, y = (i * 7) % 1900, (i * 3) % 1090
            img = np.ascontiguousarray(texture[y : y + 1080, x : x + 1920])
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def decode_only(path: Path, thread_type: str | None) -> tuple[float, int]:
    """PyAV decoding every frame and nothing else: fps and frames (the baseline)."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        if thread_type:
            s.thread_type = thread_type
        n = 0
        t0 = time.perf_counter()
        for _ in c.decode(s):
            n += 1
        return n / (time.perf_counter() - t0), n


def framebus_fps(
    path: Path, kafka: KafkaSettings, frames: int, thread_type: str, target_fps: float
) -> float:
    """framebus's decoder on the file: fps of source decoded, first frame to last delivery."""
    names = fresh_topics(kafka, 1)
    stats = DecoderStats()
    settings = DecoderSettings(
        kafka=kafka,
        topics=names,
        camera_id="bench",
        camera_url=str(path),
        target_fps=target_fps,
        decode_threading=DecodeThreading(thread_type),
    )
    marks: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        # Steady state: first decoded frame to the last one delivered (no client start-up).
        while not done.is_set():
            now = time.perf_counter()
            if "first" not in marks and stats.total("decoded") >= 1:
                marks["first"] = now
            decoded, delivered = stats.total("decoded"), stats.total("delivered")
            if decoded >= frames and delivered >= stats.total("published"):
                marks["last"] = now
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        code = service.run(settings, stats=stats)
    finally:
        end = time.perf_counter()
        done.set()
        watcher.join()
        delete_topics(kafka, names)
    marks.setdefault("last", end)
    decoded = stats.total("decoded")
    if code != 0 or decoded != frames:
        raise RuntimeError(f"decoder exit code {code}, {decoded} of {frames} frames decoded")
    return (decoded - 1) / (marks["last"] - marks["first"])


def letterbox_alternatives(frames: list[Any]) -> dict[str, float]:
    """ms per frame of the kept letterbox and of the ways it is measured against, one thread."""
    out: dict[str, float] = {}
    buf = LetterboxBuffer(640, 640)

    def opencv_planes(f: Any) -> None:
        letterbox_frame(f, buf)

    def opencv_planes_fresh_buffer(f: Any) -> None:
        letterbox_frame(f, LetterboxBuffer(640, 640))

    def rgb_then_resize(f: Any) -> None:
        buf.fill_rgb(f.to_ndarray(format="rgb24"))

    def pyav_reformat(f: Any) -> None:
        lb = buf.geometry(f.width, f.height)
        rgb = f.reformat(width=lb.resized_width, height=lb.resized_height, format="rgb24")
        window = buf.hwc[lb.pad_y : lb.pad_y + lb.resized_height, :]
        np.copyto(window, rgb.to_ndarray())

    for name, fn in (
        ("opencv resize of YUV planes (kept)", opencv_planes),
        ("same, fresh buffer per frame", opencv_planes_fresh_buffer),
        ("to_ndarray rgb24 + opencv resize", rgb_then_resize),
        ("PyAV reformat (swscale) to size", pyav_reformat),
    ):
        fn(frames[0])  # first call: scratch and caches, so the first path timed is not the cold one
        t0 = time.perf_counter()
        for f in frames:
            fn(f)
        out[name] = (time.perf_counter() - t0) / len(frames) * 1000
    # Correctness: the kept path against the RGB reference.
    ref = LetterboxBuffer(640, 640)
    ref.fill_rgb(frames[-1].to_ndarray(format="rgb24"))
    letterbox_frame(frames[-1], buf)
    out["mean abs diff kept vs reference"] = float(
        np.abs(buf.hwc.astype(int) - ref.hwc.astype(int)).mean()
    )
    return out


def threaded_letterbox_cpu_ms(frames: list[Any], threads: int, per_thread: int = 60) -> float:
    """CPU ms per frame with `threads` threads letterboxing at once, as a decoder's cameras do.

    One thread's time leaves out what many do to each other: GIL hand-overs between OpenCV
    calls, cache sharing. Process CPU (user + system) over the frames all threads did.
    """

    def camera(offset: int) -> None:
        buf = LetterboxBuffer(640, 640)
        for i in range(per_thread):
            letterbox_frame(frames[(offset + i) % len(frames)], buf)

    camera(0)  # warm the caches; each thread still makes its buffer and scratch, as a camera does
    workers = [threading.Thread(target=camera, args=(t,)) for t in range(threads)]
    cpu0 = time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return (time.process_time() - cpu0) / (threads * per_thread) * 1000


def compression_table(frames: list[Any]) -> list[tuple[str, float, float, float]]:
    """(codec, frame record bytes, compress ms, decompress ms) per frame, for each codec."""
    enc = FrameEncoder()
    buf = LetterboxBuffer(640, 640)
    tensors: list[U8] = []
    for f in frames:
        letterbox_frame(f, buf)
        tensors.append(buf.hwc.copy())
    rows = []
    for codec in Compression:
        size = 0
        c_s = d_s = 0.0
        for t in tensors:
            t0 = time.perf_counter()
            packed = compress(codec, t.data.cast("B"))
            c_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            decompress(codec, packed)
            d_s += time.perf_counter() - t0
            record = enc.encode(
                camera_id="bench",
                seq=1,
                capture_ts_us=0,
                pts_s=0.0,
                orig_width=1920,
                orig_height=1080,
                shape=t.shape,
                layout=TensorLayout.HWC,
                scale=1 / 3,
                pad_x=0,
                pad_y=140,
                compression=codec,
                tensor=packed,
            )
            size += len(record)
        n = len(tensors)
        rows.append((codec.value, size / n, c_s / n * 1000, d_s / n * 1000))
    return rows


def interleaved_runs(
    video: Path, kafka: KafkaSettings, count: int
) -> tuple[dict[str, list[float]], int]:
    """Baselines and framebus, interleaved, so a noisy neighbour hits both alike."""
    runs: dict[str, list[float]] = {"auto": [], "none": [], "fb5": [], "fb_all": []}
    n = 0
    for _ in range(count):
        base, n = decode_only(video, "AUTO")
        runs["auto"].append(base)
        runs["none"].append(decode_only(video, None)[0])
        runs["fb5"].append(framebus_fps(video, kafka, n, "auto", 5.0))
        runs["fb_all"].append(framebus_fps(video, kafka, n, "auto", 0.0))
    return runs, n


def letterbox_figures(video: Path, threads: int) -> list[Any]:
    """Print the letterbox alternatives (one thread) and the kept path's CPU with many threads."""
    with av.open(str(video)) as c:
        frames = [f for _, f in zip(range(60), c.decode(video=0), strict=False)]
    print("\nletterbox 1920x1080 -> 640x640 uint8, ms per frame (one thread):")
    for name, ms in letterbox_alternatives(frames).items():
        print(f"  {name:<40} {ms:8.3f}")
    cpu_ms = threaded_letterbox_cpu_ms(frames, threads)
    print(f"  {f'kept path, {threads} threads at once, CPU':<40} {cpu_ms:8.3f}")
    return frames


def pipeline_figures(video: Path, kafka: KafkaSettings, runs_count: int) -> None:
    """Print decode-only against framebus, interleaved runs, medians and the goal's verdict."""
    decode_only(video, "AUTO")  # warm the file cache
    runs, n = interleaved_runs(video, kafka, runs_count)
    base_auto, base_none, fb5, fb_all = (
        statistics.median(runs[k]) for k in ("auto", "none", "fb5", "fb_all")
    )
    print(f"\nvideo: {video} ({n} frames, 1920x1080 H.264, {video.stat().st_size} bytes)")
    print(f"medians of {runs_count} interleaved runs:")
    print(f"PyAV decode-only, thread_type=AUTO (baseline):    {base_auto:8.1f} fps")
    print(f"PyAV decode-only, default threading:              {base_none:8.1f} fps")
    print(f"framebus decode+sample 5/s+letterbox+publish:     {fb5:8.1f} fps of source decoded")
    print(f"framebus, every frame letterboxed and published:  {fb_all:8.1f} fps")
    print(f"ratio, every frame (worst case):                  {fb_all / base_auto:8.2f}")
    ratios = [f / b for f, b in zip(runs["fb5"], runs["auto"], strict=True)]
    print_median_ratio("framebus / PyAV decode-only at target_fps 5", ratios, GOAL)


def cameras_per_core(video: Path, frames: list[Any]) -> None:
    """Print one thread's decode rate and the 1080p25 cameras one core carries at target_fps 5."""
    single, _ = decode_only(video, "SLICE")  # slice threads only: close to one core's work
    with av.open(str(video)) as c:
        s = c.streams.video[0]
        s.thread_count = 1
        t0 = time.perf_counter()
        count = sum(1 for _ in c.decode(s))
        one_core = count / (time.perf_counter() - t0)
    prep_ms = letterbox_alternatives(frames[:20])["opencv resize of YUV planes (kept)"]
    per_cam_s = 25 / one_core + 5 * prep_ms / 1000
    print(f"\none thread decodes {one_core:.1f} fps of 1080p H.264 ({single:.1f} fps with slices)")
    print(
        f"1080p25 cameras per core at target_fps 5 (decode every frame, letterbox 5/s): "
        f"{1 / per_cam_s:.1f}"
    )


def parse_args() -> argparse.Namespace:
    parser = parser_for(__doc__)
    add_bootstrap_argument(parser)
    parser.add_argument("--frames", type=int, default=250, help="frames of the generated video")
    parser.add_argument("--video", type=Path, default=None, help="a 1080p H.264 file instead")
    parser.add_argument("--out", type=Path, default=Path("bench-output"), help="generated video")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs per figure (median)")
    parser.add_argument(
        "--letterbox-threads", type=int, default=16, help="threads letterboxing at once"
    )
    parser.add_argument(
        "--letterbox-only",
        action="store_true",
        help="only the letterbox figures (no broker needed)",
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    video = args.video or args.out / f"textured-1080p-{args.frames}.mp4"
    if not video.exists():
        print(f"generating {video} (1920x1080 H.264, 25 fps, {args.frames} frames) ...")
        write_textured_video(video, args.frames)
    cv2.setNumThreads(1)  # one camera = one thread; OpenCV's pool would hide the per-core cost
    print_header()
    if args.letterbox_only:
        letterbox_figures(video, args.letterbox_threads)
        return 0
    pipeline_figures(video, KafkaSettings(bootstrap_servers=args.bootstrap), args.runs)
    frames = letterbox_figures(video, args.letterbox_threads)
    print("\ncompression of the 640x640x3 tensor (frame record bytes on the wire):")
    print(f"  {'codec':<6} {'bytes/frame':>12} {'compress ms':>12} {'decompress ms':>14}")
    for name, size, c_ms, d_ms in compression_table(frames[:30]):
        print(f"  {name:<6} {size:12.0f} {c_ms:12.2f} {d_ms:14.2f}")
    cameras_per_core(video, frames)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
