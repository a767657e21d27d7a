"""What the alerts service did: counters only, read by its telemetry and its exit summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from framebus.kafka.stateful import StatefulStats
from framebus_alerts.rules import EngineStats


@dataclass
class AlertsStats:
    """Written by the service's one loop thread; read at scrape time and at exit."""

    engine: EngineStats
    delivered: Counter[str] = field(default_factory=Counter)  # rule -> alerts delivered
    errors: Counter[str] = field(default_factory=Counter)  # kind -> count
    loop: StatefulStats = field(default_factory=StatefulStats)
