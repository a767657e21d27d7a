import time

import confluent_kafka

from framebus.codec import VideoPacketCodec
from framebus.kafka.producer import Producer
from framebus.kafka.settings import KafkaSettings
from framebus.messages import VideoPacket
from framebus_decoder.stats import DecoderStats
from framebus_decoder.videopublisher import VideoPublisher
from tests.unit.framebus.stubproducer import Script, ScriptedClient


def packet(camera: str, seq: int) -> VideoPacket:
    return VideoPacket(
        camera, f"{camera}/s", seq, 1_000_000 + seq * 40_000, seq, seq, 1, 25, seq == 0,
        "h264", 64, 64, 25, 1, None, bytes([seq]) * 10,
    )  # fmt: skip


def publisher(
    capacity: int, script: Script | None = None
) -> tuple[VideoPublisher, ScriptedClient, DecoderStats]:
    client = ScriptedClient(script)
    producer = Producer(KafkaSettings(), {"enable.idempotence": False}, factory=lambda _c: client)
    stats = DecoderStats()
    return VideoPublisher(producer, "video", stats, capacity), client, stats


def produced(client: ScriptedClient) -> list[tuple[str, VideoPacket, int]]:
    codec = VideoPacketCodec()
    return [
        (kw["key"], codec.decode(kw["value"]), kw["timestamp"])
        for name, _args, kw in client.calls
        if name == "produce"
    ]


def test_video_publisher_when_queue_overflows_then_oldest_dropped_and_counted() -> None:
    video, client, stats = publisher(capacity=3)
    for seq in range(5):  # the thread is not started: nothing is taken meanwhile
        video.submit(packet("a", seq))
    video.start()
    assert video.close(5.0) == 0
    records = produced(client)
    assert [(key, p.packet_seq) for key, p, _ in records] == [("a", 2), ("a", 3), ("a", 4)]
    # The Kafka timestamp is the capture time, in ms.
    assert [ts for _, _, ts in records] == [1080, 1120, 1160]
    snap = stats.snapshot()["a"]
    assert snap.video == {"dropped_backpressure": 2, "published": 3}
    assert snap.video_bytes == sum(len(VideoPacketCodec().encode(p)) for _, p, _ in records)


def test_video_publisher_when_produce_fails_then_counted_and_the_next_packets_go_on() -> None:
    error = confluent_kafka.KafkaError(confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE, "too big")
    video, client, stats = publisher(capacity=10, script={"produce": [error]})
    video.start()
    for seq in range(3):
        video.submit(packet("a", seq))
    assert video.close(5.0) == 0
    assert [p.packet_seq for _, p, _ in produced(client)] == [0, 1, 2]  # 0 was tried, refused
    assert stats.snapshot()["a"].video == {"delivery_failed": 1, "published": 2}


def test_video_publisher_when_no_camera_has_video_then_no_client_is_created() -> None:
    created: list[dict[str, object]] = []
    producer = Producer(KafkaSettings(), {"enable.idempotence": False}, factory=created.append)
    video = VideoPublisher(producer, "video", DecoderStats(), 10)
    video.start()
    time.sleep(0.2)  # a few idle turns of its loop
    assert video.close(1.0) == 0
    assert created == []
