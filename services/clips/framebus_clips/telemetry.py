"""`framebus clips`' own metrics, read from ClipsStats at scrape time.

`framebus.telemetry.stateful` serves them beside the loop's (records, dead letters,
transactions), with /livez, /readyz and the watchdog.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from framebus.kafka.settings import KafkaSettings
from framebus.telemetry.families import counters
from framebus.telemetry.stateful import StatefulTelemetry
from framebus_clips.stats import ClipsStats


class ClipsCollector:
    """Reads ClipsStats at scrape time, so the loop keeps plain counters only."""

    def __init__(self, stats: ClipsStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Any]:
        """The clips service's metric families."""
        s, p = self.stats, "framebus_clips"
        yield counters(
            f"{p}_published",
            "Clip records delivered, per status (WRITTEN, VIDEO_AGED_OUT, NO_VIDEO, FAILED).",
            ["status"],
            s.delivered,
        )
        yield counters(
            f"{p}_snapshots",
            "Snapshots of alerts' frames, written or missing.",
            ["outcome"],
            s.snapshots,
        )
        yield counters(
            f"{p}_read_retries",
            "Transient Kafka errors (a broker away, a leader moving) the reads of the video and "
            "frames topics were retried after, per librdkafka error name.",
            ["code"],
            s.read_retries,
        )
        yield counters(
            f"{p}_errors",
            "Errors of the clips service, per kind (undecodable_video, undecodable_frame, "
            "undecodable_alert, write).",
            ["kind"],
            {**s.errors, "undecodable_alert": s.loop.dead_letters},
        )


def clips_telemetry(
    port: int | None, stats: ClipsStats, alerts_topic: str, kafka: KafkaSettings | None = None
) -> StatefulTelemetry:
    """The clips service's health, metrics and watchdog: the loop's figures and its own."""
    return StatefulTelemetry(
        port, "framebus_clips", stats.loop, ClipsCollector(stats), alerts_topic, kafka
    )
