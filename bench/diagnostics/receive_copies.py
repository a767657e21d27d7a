"""Each copy of a frame's bytes between the socket and the engine's input, and its CPU a frame.

A 640x640 RGB frame record (1,228,861 B) is copied, on its way into `framebus inferencer`'s engine:

1. socket -> librdkafka's fetch buffer: the kernel's copy in recv(), on librdkafka's broker thread
   (a fetch response lands whole in one buffer, at most 16 MiB);
2. that buffer -> a Python bytes object: confluent-kafka's Message_new0
   (PyBytes_FromStringAndSize: malloc and memcpy) inside consume(), on the receive thread, with
   the GIL held;
3. the bytes -> the engine's bound input slot, split into planes (`InputSlot.fill`, cv2.split) when
   a batch closes, on the receive thread; on the CPU provider that slot is the model's input;
4. on a GPU only: the slot -> device memory (`OrtValue.update_inplace`, a cudaMemcpy from
   pageable memory), on the infer thread: not measured here.

`decode_view` (the record's small fields parsed, the tensor a view) copies nothing; it is timed
beside them. Without a broker, each step runs alone on this thread, over more buffers than the
caches hold, with the services' heap setting: copy 1 over a loopback TCP connection into one
16 MiB buffer, as librdkafka receives; copy 2 as bytes() of a slice of such a buffer; copy 3
through the real `StagingPool` (batches of 16), against a plain copy into the same slot. With
`--bootstrap`, the same copies in place: a bare consumer reads a filled topic, and per frame it
prints its consuming thread's CPU inside consume() (copy 2 and the Message objects) and
librdkafka's broker threads' (copy 1 and the fetch protocol). A diagnostic; no goal.

    .venv/bin/python -m bench.diagnostics.receive_copies [--frames 960] [--reps 5]
        [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import numpy as np
import numpy.typing as npt
import onnx

from bench.benchkit import (
    SIZE,
    delete_topics,
    encode_frame,
    fill_frames,
    fresh_topics,
    parser_for,
    prepared_tensors,
    print_header,
)
from framebus.codec import FrameCodec
from framebus.kafka.consumer import FETCH_MAX_BYTES, Consumer
from framebus.kafka.settings import KafkaSettings
from framebus.malloc import MALLOC_TRIM_THRESHOLD_BYTES, keep_freed_heap
from framebus_decoder.wire import FrameEncoder
from framebus_inferencer.engine import Engine
from framebus_inferencer.enginecpu import thread_cpu_s, thread_ids
from framebus_inferencer.pipeline.staging import StagingPool
from framebus_inferencer.providers import EngineOptions
from testkit.models import near_free_model

BATCH = 16
RESPONSES = 4  # fetch-sized buffers cycled through: 64 MiB, beyond the L2 and most L3 shares


def records(n: int) -> list[bytes]:
    """`n` frame records, byte for byte what the decoder sends (a few distinct tensors)."""
    tensors, enc = prepared_tensors(), FrameEncoder()
    return [encode_frame(enc, f"cam-{i % 16:02d}", i, tensors[i % len(tensors)]) for i in range(n)]


def per_frame_ms(step: Callable[[], int]) -> float:
    """This thread's CPU ms a frame of `step`, which returns how many frames it handled."""
    started = time.thread_time()
    frames = step()
    return (time.thread_time() - started) * 1000 / frames


def socket_copy(frames: int, record_bytes: int) -> int:
    """Copy 1: receive `frames` records' bytes over loopback TCP into one 16 MiB buffer."""
    total = frames * record_bytes
    payload = bytes(FETCH_MAX_BYTES)
    with socket.create_server(("127.0.0.1", 0)) as server:

        def send() -> None:
            with socket.create_connection(server.getsockname()) as out:
                sent = 0
                while sent < total:
                    chunk = memoryview(payload)[: min(len(payload), total - sent)]
                    out.sendall(chunk)
                    sent += len(chunk)

        sender = threading.Thread(target=send)
        sender.start()
        conn, _ = server.accept()
        buffer = memoryview(bytearray(FETCH_MAX_BYTES))
        got = 0
        with conn:
            while got < total:
                n = conn.recv_into(buffer[got % FETCH_MAX_BYTES :])
                if not n:
                    break
                got += n
        sender.join()
    return got // record_bytes


def fetch_buffers() -> list[memoryview]:
    """Fetch-response-sized buffers of noise, as librdkafka holds them."""
    return [
        memoryview(bytearray(os.urandom(1024)) * (FETCH_MAX_BYTES // 1024))
        for _ in range(RESPONSES)
    ]


def bytes_copy(responses: list[memoryview], frames: int, record_bytes: int) -> int:
    """Copy 2: a bytes object of each record out of fetch-sized buffers, a backlog kept alive."""
    per_response = FETCH_MAX_BYTES // record_bytes
    held: list[bytes] = []
    for i in range(frames):
        response = responses[(i // per_response) % RESPONSES]
        offset = (i % per_response) * record_bytes
        held.append(bytes(response[offset : offset + record_bytes]))
        if len(held) > 3 * BATCH:  # the batcher's backlog: freed buffers are reused
            held = held[BATCH:]
    return frames


def decode_views(codec: FrameCodec, values: list[bytes]) -> int:
    """No copy: the codec's decode_view of each record (small fields parsed, tensor a view)."""
    for value in values:
        codec.decode_view(value)
    return len(values)


def staging_copy(pool: StagingPool, tensors: list[npt.NDArray[np.uint8]], planar: bool) -> int:
    """Copy 3: batches of 16 tensors into input slots (planes split, or a plain copy)."""
    for start in range(0, len(tensors) - BATCH + 1, BATCH):
        batch = tensors[start : start + BATCH]
        if planar:
            slot = pool.stage(batch)
        else:
            slot = pool._take(BATCH)  # noqa: SLF001 - the same slot, written without the split
            if slot is not None:
                flat = slot.staging.reshape(BATCH, -1)
                for i, t in enumerate(batch):
                    flat[i] = t
        if slot is None:
            raise RuntimeError("no free input slot")
        pool.give_back(slot)
    return len(tensors) // BATCH * BATCH


def without_broker(args: argparse.Namespace) -> None:
    """Each copy alone on this thread: medians over `--reps`."""
    values = records(args.frames)
    codec = FrameCodec()
    tensors = [np.frombuffer(codec.decode_view(v).tensor, np.uint8) for v in values]
    record_bytes = len(values[0])
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "near-free.onnx"
        onnx.save(near_free_model(SIZE), str(model))
        engine = Engine(model, EngineOptions(max_batch=BATCH))
    pool = StagingPool(engine)
    pool.warm_up()
    responses = fetch_buffers()
    steps: dict[str, Callable[[], int]] = {
        "1 socket -> 16 MiB buffer (kernel recv)": lambda: socket_copy(args.frames, record_bytes),
        "2 buffer -> bytes (malloc + memcpy)": lambda: bytes_copy(
            responses, args.frames, record_bytes
        ),
        "  decode_view (no copy)": lambda: decode_views(codec, values),
        "3 bytes -> input slot, planes split": lambda: staging_copy(pool, tensors, planar=True),
        "  bytes -> input slot, a plain copy": lambda: staging_copy(pool, tensors, planar=False),
    }
    print(f"\n{args.frames} records of {record_bytes:,} B, each step alone on one thread")
    for name, step in steps.items():
        runs = [per_frame_ms(step) for _ in range(args.reps)]
        spread = ", ".join(f"{r:.3f}" for r in runs)
        print(f"{name:<42} {statistics.median(runs):.3f} ms a frame (runs {spread})", flush=True)


def librdkafka_threads_cpu_s() -> float:
    """CPU seconds of this process's librdkafka broker threads (named rdk:broker...)."""
    total = 0.0
    for tid in thread_ids():
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
        if name.startswith("rdk:broker"):
            total += thread_cpu_s(tid) or 0.0
    return total


def in_place(args: argparse.Namespace, kafka: KafkaSettings) -> None:
    """Copies 1 and 2 where they happen: a bare consumer (framebus's settings) reading a topic."""
    names = fresh_topics(kafka, 16, prefix="copies")
    try:
        fill_frames(kafka, names.frames_topic, args.frames, 16)
        os.sync()
        print(f"\n{args.frames} records read by a bare consumer (framebus's consumer settings)")
        for rep in range(args.reps):
            wrapper = Consumer(kafka, f"copies-{uuid.uuid4().hex[:8]}")
            client = confluent_kafka.Consumer(wrapper.config)
            client.subscribe([names.frames_topic])
            rdk0, inside, got = librdkafka_threads_cpu_s(), 0.0, 0
            deadline = time.monotonic() + 120
            while got < args.frames and time.monotonic() < deadline:
                started = time.thread_time()
                got += sum(m.error() is None for m in client.consume(BATCH, 1.0))
                inside += time.thread_time() - started
            rdk = librdkafka_threads_cpu_s() - rdk0
            client.close()
            print(
                f"rep {rep + 1}: consume() on the calling thread {inside * 1000 / got:.3f} ms a "
                f"frame (copy 2, Message objects); librdkafka's broker threads "
                f"{rdk * 1000 / got:.3f} ms (copy 1, fetch protocol); {got} frames",
                flush=True,
            )
    finally:
        delete_topics(kafka, names)


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--frames", type=int, default=960)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--bootstrap", default=None, help="also measure copies 1 and 2 in place on this broker"
    )
    args = parser.parse_args()
    keep_freed_heap(MALLOC_TRIM_THRESHOLD_BYTES)  # as the inferencer does at start-up
    print_header()
    without_broker(args)
    if args.bootstrap:
        in_place(args, KafkaSettings(bootstrap_servers=args.bootstrap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
