"""Consumer lag (messages and seconds) per partition, and the latency histograms behind metrics."""

from prometheus_client import REGISTRY

from framebus_inferencer.stats import (
    InferencerStats,
    LagTracker,
    PartitionLag,
    partition_lag,
)
from framebus_inferencer.telemetry import StatsCollector

S = 1_000_000  # microseconds per second
TP = ("frames", 0)


def exported_histogram(stats: InferencerStats, name: str) -> tuple[dict[str, float], float, float]:
    """(cumulative count by upper bound, sum, count) of a histogram as /metrics exports it."""
    (family,) = (
        f for f in StatsCollector(stats).collect() if f.name == f"framebus_inferencer_{name}"
    )
    assert family.type == "histogram"
    assert {x.name.removeprefix(family.name) for x in family.samples} == {
        "_bucket",
        "_sum",
        "_count",
    }  # as before prometheus_client's Histogram: no `_created` series
    buckets = {x.labels["le"]: x.value for x in family.samples if x.name.endswith("_bucket")}
    (total,) = (x.value for x in family.samples if x.name.endswith("_sum"))
    (count,) = (x.value for x in family.samples if x.name.endswith("_count"))
    return buckets, total, count


def test_partition_lag_when_frames_in_flight_then_oldest_capture_and_offsets_to_high_watermark() -> (
    None
):
    lag = partition_lag(
        {10: 95 * S, 11: 97 * S},
        high_watermark=20,
        position=12,
        last_capture_us=97 * S,
        now_us=100 * S,
    )
    assert lag == PartitionLag(messages=10, seconds=5.0)


def test_partition_lag_when_nothing_in_flight_and_caught_up_then_zero() -> None:
    assert partition_lag({}, 20, 20, 50 * S, 100 * S) == PartitionLag(0, 0.0)


def test_partition_lag_when_unread_messages_only_then_last_capture_bounds_the_age() -> None:
    assert partition_lag({}, 25, 20, 90 * S, 100 * S) == PartitionLag(5, 10.0)


def test_partition_lag_when_watermarks_unknown_then_age_of_in_flight_frames_only() -> None:
    assert partition_lag({3: 99 * S}, None, None, None, 100 * S) == PartitionLag(0, 1.0)
    assert partition_lag({}, None, None, None, 100 * S) == PartitionLag(0, 0.0)


def test_lag_tracker_when_frames_delivered_then_lag_drops_and_captures_returned() -> None:
    tracker = LagTracker()
    for offset, capture in ((0, 90 * S), (1, 92 * S), (2, 94 * S)):
        tracker.received(TP, offset, capture)
    tracker.watermarks(TP, high=5, position=3)
    assert tracker.lags(100 * S)[TP] == PartitionLag(5, 10.0)
    assert tracker.delivered([(TP, 0), (TP, 1), (("frames", 9), 1)]) == [90 * S, 92 * S]
    assert tracker.lags(100 * S)[TP] == PartitionLag(3, 6.0)
    tracker.forget([TP])
    assert tracker.lags(100 * S) == {}


def test_stats_delivered_when_frames_delivered_then_e2e_histogram_counts_capture_to_delivery() -> (
    None
):
    stats = InferencerStats()
    stats.lag.received(TP, 0, 99 * S)
    stats.lag.received(TP, 1, 70 * S)
    stats.delivered([(TP, 0), (TP, 1)], now_us=100 * S)
    buckets, total, count = exported_histogram(stats, "e2e_latency_seconds")
    assert count == 2 and total == 31.0
    assert (buckets["0.5"], buckets["1.0"], buckets["10.0"]) == (0, 1, 1)
    assert buckets["30.0"] == 2  # cumulative, like Prometheus


def test_stats_batch_when_values_on_bounds_then_counted_in_that_bucket_in_seconds() -> None:
    stats = InferencerStats()
    for size in (1, 2, 3, 200):
        stats.batch(size, "full", inference_ms=10.0, waits_ms=[5.0] * size)
    buckets, total, count = exported_histogram(stats, "batch_size")
    assert (buckets["1.0"], buckets["2.0"], buckets["4.0"], buckets["128.0"]) == (1, 2, 3, 3)
    assert (buckets["+Inf"], total, count) == (4, 206, 4)
    assert list(buckets) == ["1.0", "2.0", "4.0", "8.0", "16.0", "32.0", "64.0", "128.0", "+Inf"]
    waits, _, waited = exported_histogram(stats, "queue_wait_seconds")
    assert waits["0.005"] == waited == 206  # 5 ms is on the 0.005 s bound
    inference, inference_total, batches = exported_histogram(stats, "inference_seconds")
    assert (inference["0.005"], inference["0.01"], batches) == (0, 4, 4)
    assert abs(inference_total - 0.04) < 1e-9


def test_stats_when_two_instances_then_each_exports_only_its_own_histograms() -> None:
    busy, idle = InferencerStats(), InferencerStats()
    busy.batch(4, "full", 1.0, [1.0] * 4)
    assert exported_histogram(busy, "batch_size")[2] == 1
    assert exported_histogram(idle, "batch_size")[2] == 0
    # Nothing lands in prometheus_client's process-wide registry (tests make many stats).
    assert REGISTRY.get_sample_value("framebus_inferencer_batch_size_count") is None


def test_collector_when_lag_known_then_exports_messages_and_seconds_per_partition() -> None:
    stats = InferencerStats(provider="CPUExecutionProvider")
    stats.lag.received(TP, 4, 0)
    stats.lag.watermarks(TP, high=10, position=5)
    families = {f.name: f for f in StatsCollector(stats).collect()}
    (lag,) = families["framebus_inferencer_consumer_lag_messages"].samples
    assert lag.labels == {"topic": "frames", "partition": "0"} and lag.value == 6
    (age,) = families["framebus_inferencer_consumer_lag_seconds"].samples
    assert age.value > 1e9  # captured at the epoch: a very old frame
    kinds = {s.labels["kind"] for s in families["framebus_inferencer_memory_bytes"].samples}
    assert kinds == {"process_rss", "arena_limit"}  # no GPU figures on the CPU provider
