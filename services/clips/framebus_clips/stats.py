"""What the clips service did: counters only, read by its telemetry and its exit summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from framebus.errors import KafkaError
from framebus.kafka.stateful import StatefulStats


@dataclass
class ClipsStats:
    """Written by the service's one loop thread; read at scrape time and at exit."""

    delivered: Counter[str] = field(default_factory=Counter)  # clip status -> records delivered
    snapshots: Counter[str] = field(default_factory=Counter)  # written / missing -> count
    errors: Counter[str] = field(default_factory=Counter)  # kind -> count
    read_retries: Counter[str] = field(default_factory=Counter)  # librdkafka error name -> count
    loop: StatefulStats = field(default_factory=StatefulStats)

    def read_retried(self, exc: KafkaError) -> None:
        """Count a transient error a read of the video or frames topic went on after."""
        self.read_retries[exc.code or "unknown"] += 1
