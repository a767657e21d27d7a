"""Helpers of the fault-injection suite: services as real processes, frames, accounting."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import numpy as np
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client.parser import text_string_to_metric_families

from framebus.codec import DetectionsCodec, FrameCodec
from framebus.compression import compress
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Compression, Detections, Frame, FrameStatus, TensorLayout
from framebus.topology import TopicSettings
from framebus_decoder.wire import FrameEncoder
from framebus_tools.process import ServiceProcess
from tests.integration.kafkautil import read_topic

SIZE = 64  # model input of the box model: small frames keep runs quick on two cores


def service_env(kafka: KafkaSettings, names: TopicSettings, **extra: object) -> dict[str, str]:
    """`FRAMEBUS_*` variables pointing a service at a broker and a test's topics."""
    env = {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_CONSUMER_GROUP": f"g-{names.frames_topic}",
    }
    env.update({f"FRAMEBUS_{k.upper()}": str(v) for k, v in extra.items()})
    return env


# The one way the demo, the benchmarks and the tests start a service as a process.
Service = ServiceProcess


def wait_for(
    predicate: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.2
) -> float:
    """Seconds until `predicate()` holds, asked every `every_s`; fails the test at the timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(every_s)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def make_frame(camera: str, seq: int, size: int = SIZE) -> bytes:
    """One encoded frame record of `size`x`size`x3 uint8."""
    frame = Frame(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000,
        orig_width=2 * size,
        orig_height=size,
        shape=(size, size, 3),
        layout=TensorLayout.HWC,
        scale=0.5,
        pad_x=0,
        pad_y=size // 4,
        tensor=np.full((size, size, 3), seq % 250, np.uint8).tobytes(),
    )
    return FrameCodec().encode(frame)


def produce(kafka: KafkaSettings, topic: str, records: Iterable[tuple[str, bytes]]) -> None:
    """Produce (key, value) records and wait for all of them to be acknowledged."""
    producer = confluent_kafka.Producer(kafka.client_config())
    for key, value in records:
        producer.produce(topic, value, key=key)
        producer.poll(0)
    assert producer.flush(30) == 0


class Feeder:
    """Produces frames of `cameras` in rounds at `rounds_per_s`, like live cameras, on a thread."""

    def __init__(
        self,
        kafka: KafkaSettings,
        topic: str,
        cameras: list[str],
        rounds: int,
        rounds_per_s: float,
    ) -> None:
        self.rounds = rounds
        self.cameras = cameras
        self._args = (kafka, topic, rounds_per_s)
        self.sent = 0
        self.thread = threading.Thread(target=self._run, name="feeder")

    def _run(self) -> None:
        kafka, topic, rate = self._args
        producer = confluent_kafka.Producer(kafka.client_config())
        start = time.monotonic()
        for seq in range(self.rounds):
            for cam in self.cameras:
                producer.produce(topic, make_frame(cam, seq), key=cam)
                self.sent += 1
            producer.poll(0)
            time.sleep(max(0.0, start + (seq + 1) / rate - time.monotonic()))
        assert producer.flush(30) == 0

    def start(self) -> Feeder:
        """Start producing."""
        self.thread.start()
        return self

    def join(self, timeout_s: float = 120.0) -> None:
        """Wait until every frame is produced."""
        self.thread.join(timeout_s)
        assert not self.thread.is_alive()

    @property
    def total(self) -> int:
        """Frames this feeder produces in all."""
        return self.rounds * len(self.cameras)


def detections_of(
    kafka: KafkaSettings, topic: str, expected: int, timeout_s: float = 60.0, settle_s: float = 2.0
) -> list[tuple[int, Detections]]:
    """(partition, record) of a detections topic, in partition order, committed records only."""
    codec = DetectionsCodec()
    msgs = read_topic(kafka, topic, expected, timeout_s=timeout_s, settle_s=settle_s)
    return [(m.partition(), codec.decode(m.value())) for m in msgs]


def frames_of(
    kafka: KafkaSettings, topic: str, expected: int, timeout_s: float = 60.0
) -> list[Frame]:
    """Every frame record of a frames topic."""
    codec = FrameCodec()
    msgs = read_topic(kafka, topic, expected, timeout_s=timeout_s, settle_s=1.0)
    return [codec.decode(m.value()) for m in msgs]


def duplicates_by_partition(records: list[tuple[int, Detections]]) -> dict[int, int]:
    """Records beyond the first for each (camera, seq), per detections partition."""
    seen: set[tuple[str, int]] = set()
    dups: Counter[int] = Counter()
    for part, d in records:
        key = (d.camera_id, d.seq)
        if key in seen:
            dups[part] += 1
        seen.add(key)
    return dict(dups)


def first_seqs_by_camera(records: list[tuple[int, Detections]]) -> dict[str, list[int]]:
    """Per camera, the seqs in the order their first record appears in the topic."""
    seen: set[tuple[str, int]] = set()
    out: dict[str, list[int]] = defaultdict(list)
    for _part, d in records:
        if (d.camera_id, d.seq) not in seen:
            seen.add((d.camera_id, d.seq))
            out[d.camera_id].append(d.seq)
    return dict(out)


def rss_kb(pid: int) -> int:
    """Resident set size of a process, KiB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def scrape(port: int, timeout_s: float = 5.0) -> str:
    """The /metrics text of a service."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback server
        return str(resp.read().decode())


def decoded_frames(port: int, camera: str) -> float:
    """A decoder's `decoded` frames of `camera` from its /metrics; 0 while it does not listen yet."""
    try:
        text = scrape(port)
    except OSError:
        return 0.0
    return metric(text, "framebus_decoder_frames_total", camera=camera, outcome="decoded")


def decoder_summary(service: Service) -> dict[str, dict[str, int]]:
    """Per-camera counters from a decoder's last summary log lines (written at exit)."""
    out: dict[str, dict[str, int]] = {}
    for rec in service.json_lines():
        if rec.get("logger", "").endswith("service") and "camera_id" in rec and "decoded" in rec:
            out[rec["camera_id"]] = {k: v for k, v in rec.items() if isinstance(v, int)}
    return out


def unaccounted_decoder_frames(counters: dict[str, int]) -> int:
    """Decoded frames not explained by sampling, publishing or a counted drop (should be 0)."""
    dropped = sum(v for k, v in counters.items() if k.startswith("dropped_"))
    return (
        counters.get("decoded", 0)
        - counters.get("sampled_out", 0)
        - counters.get("published", 0)
        - dropped
    )


# --- Records built with the decoder's own encoder, probes, and the group's commits --------------


def frame_record(
    camera: str,
    seq: int,
    size: int = SIZE,
    *,
    fill: int | None = None,
    compression: Compression = Compression.NONE,
    layout: TensorLayout = TensorLayout.HWC,
    payload: Callable[[bytes], bytes] | None = None,
) -> bytes:
    """One frame record as the decoder writes it (`framebus_decoder.wire.FrameEncoder`).

    The tensor is `size`x`size`x3 uint8 of `fill` (default seq % 250, below a poison pixel),
    compressed with `compression`; `layout` CHW stores it as (3, size, size). `payload` rewrites
    the tensor's wire bytes (e.g. to corrupt the compressed stream) before they are written.
    """
    value = seq % 250 if fill is None else fill
    shape = (size, size, 3) if layout is TensorLayout.HWC else (3, size, size)
    wire = compress(compression, np.full(shape, value, np.uint8).tobytes())
    return FrameEncoder().encode(
        camera_id=camera,
        seq=seq,
        capture_ts_us=time.time_ns() // 1000,
        pts_s=None,
        orig_width=2 * size,
        orig_height=size,
        shape=shape,
        layout=layout,
        scale=0.5,
        pad_x=0,
        pad_y=size // 4,
        compression=compression,
        tensor=wire if payload is None else payload(wire),
    )


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of a probe; (0, {}) while nothing listens yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback test server
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return int(err.code), json.loads(err.read())
    except (urllib.error.URLError, ConnectionError):
        return 0, {}


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` in a /metrics text whose labels include `labels`."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def uncommitted(kafka: KafkaSettings, group: str, topic: str) -> dict[int, int]:
    """Per partition of `topic`, records past `group`'s committed offset (empty: all committed)."""
    admin = AdminClient(kafka.client_config())
    request = [confluent_kafka.ConsumerGroupTopicPartitions(group)]
    committed = {
        tp.partition: tp.offset
        for tp in admin.list_consumer_group_offsets(request)[group].result(10).topic_partitions
        if tp.topic == topic
    }
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    specs = {confluent_kafka.TopicPartition(topic, p): OffsetSpec.latest() for p in parts}
    ends = {tp.partition: f.result(10).offset for tp, f in admin.list_offsets(specs).items()}
    behind = {p: end - max(committed.get(p, 0), 0) for p, end in ends.items()}
    return {p: n for p, n in behind.items() if n > 0}


def produce_at(
    kafka: KafkaSettings, topic: str, records: Iterable[tuple[str, bytes]]
) -> list[tuple[int, int]]:
    """Produce (key, value) records in order; the (partition, offset) each was written at."""
    producer = confluent_kafka.Producer({**kafka.client_config(), "enable.idempotence": True})
    where: dict[int, tuple[int, int]] = {}

    def report(i: int) -> Callable[[Any, Any], None]:
        def done(err: Any, msg: Any) -> None:
            assert err is None, err
            where[i] = (msg.partition(), msg.offset())

        return done

    count = 0
    for count, (key, value) in enumerate(records, start=1):
        producer.produce(topic, value, key=key, on_delivery=report(count - 1))
        producer.poll(0)
    assert producer.flush(30) == 0
    return [where[i] for i in range(count)]


def wait_records(
    kafka: KafkaSettings, topic: str, n: int, services: Iterable[Service], timeout_s: float = 60.0
) -> float:
    """Seconds until `topic` holds `n` committed records; fails at once if a service exits."""
    watched = list(services)

    def done() -> bool:
        for service in watched:
            assert service.alive(), f"{service.command} exited:\n{service.text()[-3000:]}"
        return len(read_topic(kafka, topic, n, timeout_s=1.0)) >= n

    return wait_for(done, timeout_s, f"{n} records on {topic}")


# --- Live cameras through the decoder, on the three-broker cluster, and what they left ----------


def camera_decoder_env(
    kafka: KafkaSettings,
    names: TopicSettings,
    video: Path,
    tmp_path: Path,
    cameras: Sequence[str],
    input_size: int,
) -> dict[str, str]:
    """A decoder playing `video` in a loop, in real time at 5 fps, as each of `cameras`.

    Its backpressure blocks: these tests count what a broker's failure loses, and a loaded
    machine would otherwise make the decoder drop frames by its own (counted) policy.
    """
    cams = tmp_path / "cameras.yaml"
    cams.write_text(
        "cameras:\n"
        + "".join(
            f"  - {{id: {c}, url: '{video}', loop: true, realtime: true}}\n" for c in cameras
        ),
        encoding="utf-8",
    )
    return service_env(
        kafka,
        names,
        cameras_file=cams,
        target_fps=5,
        input_width=input_size,
        input_height=input_size,
        drain_timeout_s=30,
        backpressure="block",
    )


@dataclass(frozen=True)
class StreamOutcome:
    """What a decoder -> inferencer run left in Kafka."""

    counters: dict[str, dict[str, int]]  # decoder's per-camera exit summary
    frames: dict[tuple[str, int], int]  # (camera, seq) -> frames-topic partition
    frame_order: dict[str, list[int]]  # per camera, seqs in frames-topic order
    records: list[tuple[int, Detections]]  # read_committed detections, partition order


def stream_outcome(
    kafka: KafkaSettings, names: TopicSettings, counters: dict[str, dict[str, int]]
) -> StreamOutcome:
    """Read back the frames the decoder reported delivered and every committed detections record."""
    delivered = sum(c["delivered"] for c in counters.values())
    codec = FrameCodec()
    frames = [
        (m.partition(), codec.decode(m.value()))
        for m in read_topic(kafka, names.frames_topic, delivered, timeout_s=60, settle_s=1.0)
    ]
    order: dict[str, list[int]] = {}
    for _, f in frames:
        order.setdefault(f.camera_id, []).append(f.seq)
    return StreamOutcome(
        counters=counters,
        frames={(f.camera_id, f.seq): part for part, f in frames},
        frame_order=order,
        records=detections_of(kafka, names.detections_topic, delivered, timeout_s=60),
    )


def assert_every_frame_recorded(out: StreamOutcome, cameras: Sequence[str]) -> None:
    """Decoder counters balance, the frames topic is gap- and duplicate-free, each frame recorded."""
    for cam in cameras:
        c = out.counters[cam]
        assert unaccounted_decoder_frames(c) == 0, (cam, c)
        assert c["published"] == c["delivered"] > 0, (cam, c)
        assert not any(v for k, v in c.items() if k.startswith("dropped_")), (cam, c)
        # Idempotent producer through a leader change: each seq once, in order, none missing.
        assert out.frame_order[cam] == list(range(c["delivered"])), cam
    keys = {(d.camera_id, d.seq) for _, d in out.records}
    missing = set(out.frames) - keys
    assert not missing, f"{len(missing)} frames without a record, e.g. {sorted(missing)[:5]}"
    assert keys <= set(out.frames)
    assert all(d.status is FrameStatus.INFERRED or d.reason for _, d in out.records)
    assert all(s == sorted(s) for s in first_seqs_by_camera(out.records).values())


def cluster_metadata(kafka: KafkaSettings, topic: str | None = None) -> Any:
    """Cluster metadata (brokers, and per partition its leader, replicas and in-sync replicas)."""
    admin = AdminClient({**kafka.client_config(), "log_level": 0})
    return admin.list_topics(topic, timeout=10)


def under_replicated(kafka: KafkaSettings) -> list[tuple[str, int]]:
    """Partitions whose in-sync replicas are fewer than their replicas (or have no leader)."""
    try:
        topics = cluster_metadata(kafka).topics
    except confluent_kafka.KafkaException:
        return [("?", -1)]
    return [
        (name, p.id)
        for name, t in topics.items()
        for p in t.partitions.values()
        if p.leader < 0 or set(p.isrs) != set(p.replicas)
    ]
