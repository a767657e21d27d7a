"""Bad inputs: a clear error each, the service still running, bad messages dead-lettered.

Every kind of bad frame record docs/reliability.md names is built with framebus's own encoders
(`FrameEncoder`, `FrameCodec`, `framebus.compression`) and interleaved with good frames, so bad
and good records share fetches and batches of a real `framebus inferencer` process, which is then
killed and restarted in the same consumer group.

Covered elsewhere, not repeated here: garbage bytes from a real decoder run
(tests/integration/test_pipeline.py), a truncated video, a corrupt file, an unsupported codec and
an unreachable camera URL (tests/integration/test_decoder.py, `..._when_inputs_are_bad_...`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest

from framebus.codec import HEADER_BYTES, MAGIC, DetectionsCodec, FrameCodec
from framebus.compression import decompress
from framebus.errors import CodecError
from framebus.kafka import deadletter
from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import TopicSpec, ensure_topics
from framebus.messages import Compression, Frame, FrameStatus, TensorLayout
from framebus.topology import TopicSettings
from framebus_decoder import service as decoder_service
from framebus_decoder.settings import DecoderSettings
from framebus_decoder.stats import CameraState, DecoderStats
from framebus_inferencer import service as inferencer_service
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.stats import InferencerStats
from framebus_tools.process import ServiceProcess, free_port
from testkit.models import fixed_output_model
from tests.integration.conftest import TopicFactory
from tests.integration.kafkautil import read_topic
from tests.reliability.harness import (
    SIZE,
    Service,
    detections_of,
    frame_record,
    make_frame,
    metric,
    produce,
    produce_at,
    scrape,
    service_env,
    uncommitted,
    wait_for,
    wait_records,
)

pytestmark = pytest.mark.integration


def test_inferencer_when_bad_messages_then_each_dead_lettered_with_source_and_reason_and_it_runs_on(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path
) -> None:
    names = topics()
    good = make_frame("cam-ok", 0)
    garbage = b"\x00definitely not avro\xff" * 8
    unknown_schema = b"\xc3\x01" + bytes(range(8)) + good[10:]  # marker, foreign fingerprint
    wrong_shape = make_frame("cam-small", 0, size=SIZE // 2)  # model expects SIZE x SIZE
    bad = [(b"garbage", garbage), (b"unknown", unknown_schema), (b"shape", wrong_shape)]
    produce(kafka, names.frames_topic, [(k.decode(), v) for k, v in bad])
    stats, stop = InferencerStats(), threading.Event()
    settings = InferencerSettings(
        kafka=kafka, topics=names, model_path=box_model, consumer_group=f"g-{names.frames_topic}"
    )
    thread = threading.Thread(target=inferencer_service.run, args=(settings, stop, stats))
    thread.start()
    try:
        dead = read_topic(kafka, names.deadletter_topic, 3, timeout_s=60)
        produce(kafka, names.frames_topic, [("cam-ok", good)])  # after the bad ones: still served
        (result,) = read_topic(kafka, names.detections_topic, 1, timeout_s=60)
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(30)
    assert DetectionsCodec().decode(result.value()).camera_id == "cam-ok"
    assert [m.value() for m in dead] == [v for _, v in bad]  # the original bytes, in order
    reasons = []
    for offset, msg in enumerate(dead):
        headers = dict(msg.headers())
        assert headers[deadletter.SOURCE_TOPIC] == names.frames_topic.encode()
        assert headers[deadletter.SOURCE_PARTITION] == b"0"
        assert headers[deadletter.SOURCE_OFFSET] == str(offset).encode()
        assert headers[deadletter.SERVICE] == b"inferencer"
        assert msg.key() == bad[offset][0]
        reasons.append(headers[deadletter.REASON].decode())
    assert "C3 01" in reasons[0] or "marker" in reasons[0], reasons[0]
    assert "unknown schema fingerprint 0001020304050607" in reasons[1], reasons[1]
    assert f"does not match the model input ({SIZE}, {SIZE}, 3)" in reasons[2], reasons[2]
    assert stats.dead_letters == 3
    assert stats.by_status == {"INFERRED": 1}  # no FAILED or other record beside the good one


def test_decoder_when_record_larger_than_topic_allows_then_counted_logged_and_it_runs_on(
    kafka: KafkaSettings, small_video: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = f"small-{time.monotonic_ns()}"
    names = TopicSettings(f"{run}.frames", f"{run}.detections", f"{run}.deadletter")
    # 20 kB per record on this topic; a 160x160x3 frame is 76,800 B.
    ensure_topics(kafka, [TopicSpec(names.frames_topic, 1, 1, {"max.message.bytes": "20000"})])
    stats, stop = DecoderStats(), threading.Event()
    settings = DecoderSettings(
        kafka=kafka,
        topics=names,
        camera_id="big",
        camera_url=str(small_video),
        target_fps=5,
        loop=True,
        realtime=True,
        input_width=160,
        input_height=160,
        drain_timeout_s=5,
    )
    caplog.set_level(logging.ERROR)
    codes: list[int] = []
    thread = threading.Thread(
        target=lambda: codes.append(decoder_service.run(settings, stop, stats))
    )
    thread.start()
    try:
        wait_for(lambda: stats.total("delivery_failed") >= 3, 30, "failed deliveries counted")
        assert thread.is_alive() and stats.state("big") is CameraState.STREAMING
    finally:
        stop.set()
        thread.join(30)
    snap = stats.snapshot()["big"]
    assert snap.count("delivered") == 0
    # Every frame is accounted for: refused by the broker (counted), or dropped for a reason.
    assert snap.count("published") == snap.count("delivery_failed")
    assert snap.count("decoded") == (
        snap.count("sampled_out") + snap.count("published") + sum(snap.dropped.values())
    )
    assert "MSG_SIZE_TOO_LARGE" in snap.last_error or "too large" in snap.last_error.lower()
    assert any("frame delivery failed" in r.getMessage() for r in caplog.records)
    assert codes == [1]  # undelivered frames make a non-zero exit


def test_services_when_started_with_bad_model_or_config_then_exit_2_with_a_clear_message(
    tmp_path: Path,
) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07this is not a protobuf" * 10)
    odd_head = tmp_path / "odd-head.onnx"
    outputs = {"output0": np.zeros((5, 5, 5), np.float32)}
    onnx.save(fixed_output_model(outputs, input_size=SIZE), str(odd_head))
    cases = {
        "missing model": ("inferencer", {"FRAMEBUS_MODEL_PATH": str(tmp_path / "nope.onnx")}),
        "corrupt model": ("inferencer", {"FRAMEBUS_MODEL_PATH": str(corrupt)}),
        "unrecognised head": ("inferencer", {"FRAMEBUS_MODEL_PATH": str(odd_head)}),
        "invalid inferencer setting": ("inferencer", {"FRAMEBUS_MAX_BATCH": "0"}),
        "invalid decoder setting": ("decoder", {"FRAMEBUS_TARGET_FPS": "fast"}),
    }
    unreachable = {"FRAMEBUS_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    procs = {
        name: ServiceProcess(cmd, {**unreachable, **env}, tmp_path / f"{name}.log")
        for name, (cmd, env) in cases.items()
    }
    out = {name: (proc.wait(60), proc.text()) for name, proc in procs.items()}
    expected = {
        "missing model": "model file not found",
        "corrupt model": "cannot load ONNX model",
        "unrecognised head": "cannot tell the detector head from output shape",
        "invalid inferencer setting": "FRAMEBUS_MAX_BATCH (--max-batch): must be between 1 and 256",
        "invalid decoder setting": "FRAMEBUS_TARGET_FPS (--target-fps): cannot use 'fast'",
    }
    for name, needle in expected.items():
        code, text = out[name]
        assert code == 2, (name, text[-2000:])
        assert needle in text, (name, text[-2000:])
        assert "Traceback" not in text, (name, text[-2000:])


def test_frame_codec_when_truncated_record_then_codec_error_not_crash() -> None:
    good = make_frame("c", 1)
    with pytest.raises(CodecError):
        FrameCodec().decode(good[: len(good) // 3])


# --- Every bad kind, mixed with good frames, through inferencer processes killed and restarted ---

TIB = 1 << 40  # a compressed tensor's header claiming this much must not make anyone allocate it
MASK32 = 0xFFFFFFFF


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a few bytes (the LZ4 frame header checksum); inputs under 16 bytes only."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    assert len(data) < 16

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & MASK32

    h = (seed + p5 + len(data)) & MASK32
    i = 0
    while i + 4 <= len(data):
        h = rotl((h + int.from_bytes(data[i : i + 4], "little") * p3) & MASK32, 17) * p4 & MASK32
        i += 4
    for b in data[i:]:
        h = rotl((h + b * p5) & MASK32, 11) * p1 & MASK32
    h ^= h >> 15
    h = h * p2 & MASK32
    h ^= h >> 13
    h = h * p3 & MASK32
    return h ^ (h >> 16)


def lz4_claiming(size: int) -> Callable[[bytes], bytes]:
    """An LZ4 frame whose (well-formed, checksummed) header claims `size` bytes of content."""

    def rewrite(wire: bytes) -> bytes:
        flg, bd = wire[4], wire[5]
        assert flg & 0x08, "framebus.compression writes the content size"
        descriptor = bytes([flg, bd]) + size.to_bytes(8, "little")
        checksum = (_xxh32(descriptor) >> 8) & 0xFF
        return wire[:4] + descriptor + bytes([checksum]) + wire[15:]

    return rewrite


def zstd_claiming(size: int) -> Callable[[bytes], bytes]:
    """A zstd frame whose header claims `size` bytes of content (an 8-byte content size field)."""

    def rewrite(wire: bytes) -> bytes:
        descriptor = wire[4]
        assert descriptor == 0x60, f"single segment, 2-byte content size expected: {descriptor:#x}"
        return wire[:4] + b"\xe0" + size.to_bytes(8, "little") + wire[7:]

    return rewrite


def _cut_short(wire: bytes) -> bytes:
    return wire[: len(wire) // 2]


def _invert_blocks(wire: bytes) -> bytes:
    header = 7  # magic, descriptor, 2-byte content size: what follows are the blocks
    return wire[:header] + bytes(b ^ 0xFF for b in wire[header:])


def _wrong_dtype(seq: int) -> bytes:
    tensor = np.zeros((SIZE, SIZE, 3), np.float32).tobytes()
    frame = Frame("bad-dtype", seq, time.time_ns() // 1000, 2 * SIZE, SIZE, (SIZE, SIZE, 3),
                  TensorLayout.HWC, 0.5, 0, SIZE // 4, tensor, dtype="float32")  # fmt: skip
    return FrameCodec().encode(frame)


# kind -> (its record for a sequence number, what its dead letter's reason must say)
BAD_KINDS: dict[str, tuple[Callable[[int], bytes], str]] = {
    "garbage": (lambda n: b"\x00definitely not avro %d\xff" % n * 8, "C3 01"),
    "unknown_schema": (
        lambda n: MAGIC + bytes(range(8)) + frame_record("bad-schema", n)[HEADER_BYTES:],
        "unknown schema fingerprint 0001020304050607",
    ),
    "wrong_shape": (
        lambda n: frame_record("bad-shape", n, size=SIZE // 2),
        f"does not match the model input ({SIZE}, {SIZE}, 3)",
    ),
    "wrong_dtype": (_wrong_dtype, "frame dtype float32 is not uint8"),
    "wrong_layout": (
        lambda n: frame_record("bad-layout", n, layout=TensorLayout.CHW),
        "frame layout CHW is not HWC",
    ),
    "truncated": (lambda n: frame_record("bad-cut", n)[:-100], "corrupt Frame body"),
    "corrupt_lz4": (
        lambda n: frame_record("bad-lz4", n, compression=Compression.LZ4, payload=_cut_short),
        "corrupt lz4 tensor",
    ),
    "corrupt_zstd": (
        lambda n: frame_record("bad-zstd", n, compression=Compression.ZSTD, payload=_invert_blocks),
        "corrupt zstd tensor",
    ),
    "lz4_size_lie": (
        lambda n: frame_record(
            "bad-lz4-size", n, compression=Compression.LZ4, payload=lz4_claiming(TIB)
        ),
        f"{TIB} bytes",
    ),
    "zstd_size_lie": (
        lambda n: frame_record(
            "bad-zstd-size", n, compression=Compression.ZSTD, payload=zstd_claiming(TIB)
        ),
        f"{TIB} bytes",
    ),
}
GOOD_COMPRESSIONS = (Compression.NONE, Compression.LZ4, Compression.ZSTD)


@dataclass
class Sent:
    """What a test produced: good frames by (camera, seq), bad records by value."""

    good: set[tuple[str, int]] = field(default_factory=set)
    bad: dict[bytes, tuple[str, str]] = field(default_factory=dict)  # value -> (key, kind)
    where: dict[bytes, tuple[int, int]] = field(default_factory=dict)  # value -> (part, offset)


def mixed_round(sent: Sent, round_no: int) -> list[tuple[str, bytes]]:
    """One good frame before each bad kind: good and bad records share fetches and batches."""
    out = []
    for i, (kind, (build, _)) in enumerate(BAD_KINDS.items()):
        cam, seq = f"good-{i % 2}", round_no * len(BAD_KINDS) // 2 + i // 2
        good = frame_record(cam, seq, compression=GOOD_COMPRESSIONS[seq % 3])
        sent.good.add((cam, seq))
        bad = build(round_no * len(BAD_KINDS) + i)
        assert bad not in sent.bad
        sent.bad[bad] = (f"bad-{kind}", kind)
        out += [(cam, good), (f"bad-{kind}", bad)]
    return out  # the last record is a bad one: the partition ends on a dead-lettered offset


def send(kafka: KafkaSettings, topic: str, sent: Sent, records: list[tuple[str, bytes]]) -> None:
    """Produce and remember where each bad record was written."""
    for (_, value), at in zip(records, produce_at(kafka, topic, records), strict=True):
        if value in sent.bad:
            sent.where[value] = at


def check_accounted(kafka: KafkaSettings, names: TopicSettings, sent: Sent) -> None:
    """One INFERRED record per good frame, one dead letter per bad record, and nothing else."""
    records = detections_of(kafka, names.detections_topic, len(sent.good), 30, settle_s=3)
    keys = Counter((d.camera_id, d.seq) for _, d in records)
    assert set(keys) == sent.good, sorted(set(keys) ^ sent.good)[:5]
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
    statuses = Counter(d.status for _, d in records)
    assert statuses == {FrameStatus.INFERRED: len(sent.good)}, statuses  # no FAILED, no stale
    dead = read_topic(kafka, names.deadletter_topic, len(sent.bad), timeout_s=30, settle_s=3)
    values = Counter(m.value() for m in dead)
    assert set(values) == set(sent.bad), f"{len(set(sent.bad) - set(values))} not dead-lettered"
    assert max(values.values()) == 1, "a message was dead-lettered twice"
    for msg in dead:
        key, kind = sent.bad[msg.value()]
        headers = dict(msg.headers())
        reason = headers[deadletter.REASON].decode()
        assert BAD_KINDS[kind][1] in reason, (kind, reason)
        assert msg.key() == key.encode(), kind
        assert headers[deadletter.SOURCE_TOPIC] == names.frames_topic.encode()
        part, offset = sent.where[msg.value()]
        assert headers[deadletter.SOURCE_PARTITION] == str(part).encode(), kind
        assert headers[deadletter.SOURCE_OFFSET] == str(offset).encode(), kind
        assert headers[deadletter.SERVICE] == b"inferencer"


def _inferencer_env(
    kafka: KafkaSettings, names: TopicSettings, model: Path, **extra: object
) -> dict[str, str]:
    return service_env(kafka, names, model_path=model, max_batch=4, max_wait_ms=20, **extra)


@pytest.mark.slow
def test_inferencer_process_when_every_bad_kind_shares_batches_and_it_is_killed_after_commit_then_restart_adds_nothing(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path, tmp_path: Path
) -> None:
    names = topics()
    sent = Sent()
    # Produced before the inferencer starts: its first fetch takes them all, good and bad mixed.
    send(kafka, names.frames_topic, sent, mixed_round(sent, 0))
    port = free_port()
    env = _inferencer_env(kafka, names, box_model, http_port=port)
    first = Service("inferencer", env, tmp_path / "first.log")
    group = env["FRAMEBUS_CONSUMER_GROUP"]
    try:
        wait_records(kafka, names.detections_topic, len(sent.good), [first], 90)
        wait_records(kafka, names.deadletter_topic, len(sent.bad), [first], 30)
        # Killed only once the group's commits reach the end of the partition, whose last
        # record is a dead-lettered one: a restart must then find nothing to do.
        wait_for(lambda: not uncommitted(kafka, group, names.frames_topic), 30, "commits")
        metrics = scrape(port)
        assert first.alive(), first.text()[-3000:]
    finally:
        first.signal(signal.SIGKILL)
        first.wait(10)
    assert metric(metrics, "framebus_inferencer_dead_letters_total") == len(sent.bad)
    assert metric(metrics, "framebus_inferencer_frames_total", status="INFERRED") == len(sent.good)
    assert metric(metrics, "framebus_inferencer_frames_total", status="FAILED") == 0
    second = Service(
        "inferencer", {**env, "FRAMEBUS_STOP_AFTER_IDLE_S": "3"}, tmp_path / "second.log"
    )
    assert second.wait(90) == 0, second.text()[-3000:]
    assert "dead-lettering" not in second.text()
    check_accounted(kafka, names, sent)


@pytest.mark.slow
def test_inferencer_process_when_every_bad_kind_streams_and_it_is_killed_mid_stream_exactly_once_then_each_has_one_outcome(
    kafka: KafkaSettings, topics: TopicFactory, box_model: Path, tmp_path: Path
) -> None:
    names = topics(frames_partitions=2)
    sent = Sent()
    env = _inferencer_env(
        kafka,
        names,
        box_model,
        delivery="exactly_once",
        transactional_id=f"tx-{names.frames_topic}",
    )
    send(kafka, names.frames_topic, sent, mixed_round(sent, 0))
    first = Service("inferencer", env, tmp_path / "first.log")
    rounds = 12

    def feed() -> None:
        for r in range(1, rounds):  # 20 records every 0.25 s while the first process works
            send(kafka, names.frames_topic, sent, mixed_round(sent, r))
            time.sleep(0.25)

    feeder = threading.Thread(target=feed, name="mixed-feeder")
    try:
        wait_records(kafka, names.detections_topic, len(sent.good), [first], 90)
        feeder.start()
        wait_records(kafka, names.detections_topic, 40, [first], 60)  # mid-stream
        assert feeder.is_alive(), "the kill must land while records still arrive"
    finally:
        first.signal(signal.SIGKILL)
        first.wait(10)
        if feeder.ident is not None:
            feeder.join(60)
    assert len(sent.good) == rounds * len(BAD_KINDS)
    second = Service(
        "inferencer", {**env, "FRAMEBUS_STOP_AFTER_IDLE_S": "4"}, tmp_path / "second.log"
    )
    assert second.wait(120) == 0, second.text()[-3000:]
    check_accounted(kafka, names, sent)
    # An aborted transaction's work is done again by the restart (and read by nobody): how much.
    print(
        f"dead-lettered: {first.text().count('dead-lettering')} by the killed process, "
        f"{second.text().count('dead-lettering')} after the restart, of {len(sent.bad)}"
    )


@pytest.mark.parametrize("kind", ["lz4_size_lie", "zstd_size_lie"])
def test_decompress_when_header_claims_a_terabyte_then_codec_error_before_allocating(
    kind: str,
) -> None:
    # Both codecs allocate the claimed size first: unbounded, this raised MemoryError and the
    # inferencer process died on the record, again after every restart.
    frame = FrameCodec().decode_view(BAD_KINDS[kind][0](0))
    with pytest.raises(CodecError, match=f"claims {TIB} bytes, more than the 12288 bytes"):
        decompress(frame.compression, frame.tensor, max_bytes=SIZE * SIZE * 3)
