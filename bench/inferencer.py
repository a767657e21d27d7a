"""Inferencer: bare ONNX Runtime against framebus over real Kafka, and a naive per-frame loop.

All from one run on one machine, on a YOLOv8n-sized model (YOLOv8n's layers and widths, random
weights, about 8.7 GFLOPs at 640x640) generated here, at batch sizes 1 to 16:
- bare: `session.run` on ready float32 NCHW batches, nothing else (the same-run baseline);
- framebus: consume -> batch -> infer (uint8 IO binding) -> NMS -> publish -> commit over Kafka,
  from the first frame received to the last record delivered;
- naive: one frame at a time, float32 NCHW on the wire, plain `session.run`, flush per frame.

Goal: framebus / bare ONNX Runtime >= 0.90 at each batch size; framebus above the naive loop.

    .venv/bin/python -m bench.inferencer [--frames 96] [--runs 3] [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import confluent_kafka
import numpy as np
import onnx
import onnxruntime as ort

from bench.benchkit import (
    add_bootstrap_argument,
    delete_topics,
    fresh_topics,
    parser_for,
    print_header,
    verdict,
)
from framebus.codec import DetectionsCodec, FrameCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Detections, Frame, FrameStatus, TensorLayout
from framebus.pixels import FrameFormat
from framebus.topology import TopicSettings
from framebus_inferencer import service
from framebus_inferencer.postprocess import Decoder
from framebus_inferencer.settings import HeadFormat, InferencerSettings
from framebus_inferencer.stats import InferencerStats
from testkit.models import conv_gflops, yolov8n_like_model

BATCHES = (1, 2, 4, 8, 16)
SIZE = 640
GOAL = 0.90


def bare(model: Path, batch: int, frames: int, runs: int) -> float:
    """img/s of `session.run` on a ready float32 batch (median of `runs`)."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((batch, 3, SIZE, SIZE), dtype=np.float32)
    session.run(None, {"images": x})  # warm-up
    rates = []
    for _ in range(runs):
        n = max(1, frames // batch)
        t = time.perf_counter()
        for _ in range(n):
            session.run(None, {"images": x})
        rates.append(n * batch / (time.perf_counter() - t))
    return statistics.median(rates)


def produce_frames(kafka: KafkaSettings, topic: str, n: int, float_wire: bool = False) -> None:
    """`n` frame records of one random image, uint8 HWC or (`float_wire`) float32 CHW."""
    rng = np.random.default_rng(1)
    image = rng.integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8)
    codec = FrameCodec()
    producer = confluent_kafka.Producer({**kafka.client_config(), "message.max.bytes": 9_000_000})
    for i in range(n):
        cam = f"cam-{i % 8}"
        if float_wire:  # what a naive pipeline ships: float32 NCHW, 4x the bytes
            tensor = (image.transpose(2, 0, 1).astype(np.float32) / 255).tobytes()
            shape, layout, dtype = (3, SIZE, SIZE), TensorLayout.CHW, "float32"
        else:
            tensor, shape, layout, dtype = (
                image.tobytes(),
                (SIZE, SIZE, 3),
                TensorLayout.HWC,
                "uint8",
            )
        frame = Frame(
            cam,
            i // 8,
            time.time_ns() // 1000,
            1280,
            720,
            shape,
            layout,
            0.5,
            0,
            140,
            tensor,
            dtype=dtype,
        )
        producer.produce(topic, codec.encode(frame), key=cam)
        producer.poll(0)
    producer.flush(60)


def framebus_rate(kafka: KafkaSettings, model: Path, batch: int, frames: int) -> float:
    """img/s of framebus's inferencer (in-process) draining `frames` records, first to last."""
    names = fresh_topics(kafka, 4)
    try:
        return framebus_drain(kafka, names, model, batch, frames)
    finally:
        delete_topics(kafka, names)


def framebus_drain(
    kafka: KafkaSettings, names: TopicSettings, model: Path, batch: int, frames: int
) -> float:
    produce_frames(kafka, names.frames_topic, frames)
    settings = InferencerSettings(
        kafka=kafka,
        topics=names,
        model_path=model,
        consumer_group=f"g-{names.frames_topic}",
        max_batch=batch,
        max_wait_ms=5,
        stop_after_idle_s=1.0,
        frame_format=FrameFormat.RGB,  # the records `produce_frames` writes
    )
    stats = InferencerStats()
    stop = threading.Event()
    marks: dict[str, float] = {}

    def watch() -> None:
        while not stop.is_set():
            if "t0" not in marks and stats.frames_received:
                marks["t0"] = time.perf_counter()
            if sum(stats.by_status.values()) >= frames:
                marks["t1"] = time.perf_counter()
                return
            time.sleep(0.0005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    service.run(settings, stop, stats)
    stop.set()
    watcher.join()
    # Publishing of a batch ends with its delivery report, so t1 is "every record delivered".
    return frames / (marks["t1"] - marks["t0"])


def naive_rate(kafka: KafkaSettings, model: Path, frames: int) -> float:
    """img/s of a naive loop: one frame at a time, float32 on the wire, a flush per frame."""
    names = fresh_topics(kafka, 4)
    try:
        return naive_drain(kafka, names, model, frames)
    finally:
        delete_topics(kafka, names)


def naive_drain(kafka: KafkaSettings, names: TopicSettings, model: Path, frames: int) -> float:
    produce_frames(kafka, names.frames_topic, frames, float_wire=True)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    session.run(None, {"images": np.zeros((1, 3, SIZE, SIZE), np.float32)})
    consumer = confluent_kafka.Consumer(
        {
            **kafka.client_config(),
            "group.id": f"naive-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.offset.store": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )
    producer = confluent_kafka.Producer(kafka.client_config())
    consumer.subscribe([names.frames_topic])
    frame_codec, det_codec = FrameCodec(), DetectionsCodec()
    decoder = Decoder(HeadFormat.YOLOV8)
    done, t0 = 0, 0.0
    while done < frames:
        msg = consumer.poll(1.0)
        if msg is None or msg.error():
            continue
        if done == 0:
            t0 = time.perf_counter()
        frame = frame_codec.decode(msg.value() or b"")
        x = np.frombuffer(frame.tensor, np.float32).reshape(1, 3, SIZE, SIZE)
        (out,) = session.run(None, {"images": x})
        decoder.decode([out], 1)
        det = Detections(
            frame.camera_id, frame.seq, frame.capture_ts_us, FrameStatus.INFERRED, "m", "1"
        )
        producer.produce(names.detections_topic, det_codec.encode(det), key=frame.camera_id)
        producer.flush(30)
        consumer.store_offsets(msg)
        done += 1
    rate = (frames - 1) / (time.perf_counter() - t0) if frames > 1 else 0.0
    consumer.close()
    return rate


def main() -> int:
    parser = parser_for(__doc__)
    add_bootstrap_argument(parser)
    parser.add_argument("--frames", type=int, default=96, help="frames per measured run")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    args = parser.parse_args()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    print_header()
    with tempfile.TemporaryDirectory() as tmp:
        model_path = Path(tmp) / "yolov8n-like.onnx"
        model = yolov8n_like_model(SIZE)
        onnx.save(model, str(model_path))
        print(
            f"model: YOLOv8n-sized, random weights, {conv_gflops(model):.2f} GFLOPs at "
            f"{SIZE}x{SIZE}; {args.frames} frames x {args.runs} runs per figure (median)"
        )
        print(f"{'batch':>5} {'bare img/s':>11} {'framebus img/s':>15} {'ratio':>6}")
        results = {}
        for b in BATCHES:
            ort_rate = bare(model_path, b, args.frames, args.runs)
            fb = statistics.median(
                framebus_rate(kafka, model_path, b, args.frames) for _ in range(args.runs)
            )
            results[b] = fb
            ratio = fb / ort_rate
            print(f"{b:>5} {ort_rate:>11.2f} {fb:>15.2f} {ratio:>6.2f}  {verdict(ratio, GOAL)}")
        naive = statistics.median(
            naive_rate(kafka, model_path, args.frames) for _ in range(args.runs)
        )
        best = max(results, key=lambda k: results[k])
        print(f"naive per-frame pipeline (batch 1, no IO binding, float32 wire): {naive:.2f} img/s")
        print(
            f"framebus batch {best} vs naive: {results[best] / naive:.2f}x; "
            f"framebus batch 8 vs naive: {results[8] / naive:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
