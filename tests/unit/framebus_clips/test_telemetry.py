"""The clips service's own metrics, read from its counters at scrape time."""

from __future__ import annotations

from framebus.errors import KafkaError
from framebus_clips.stats import ClipsStats
from framebus_clips.telemetry import ClipsCollector


def test_collect_when_reads_were_retried_then_read_retries_counted_per_librdkafka_error() -> None:
    stats = ClipsStats()
    for code in ("_TIMED_OUT", "_TIMED_OUT", "_DESTROY_BROKER"):
        stats.read_retried(KafkaError("cannot find t[1]'s offset at 0 ms: ...", code))
    (family,) = [
        f for f in ClipsCollector(stats).collect() if f.name == "framebus_clips_read_retries"
    ]
    got = {s.labels["code"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert got == {"_TIMED_OUT": 2, "_DESTROY_BROKER": 1}
