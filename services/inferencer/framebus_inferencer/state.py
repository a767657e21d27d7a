"""The inferencer's run state: what its threads decide with and readiness reports.

Kept apart from `InferencerStats`, which holds counters only and is read by metrics alone: this
is control state (whether the idle clock runs, whether the service is ready), outlives each
pipeline across rewinds, and is set by one thread each.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class RunState:
    """Set once the engine is warm (infer thread) and once partitions are assigned (receive)."""

    warmed_up: threading.Event = field(default_factory=threading.Event)
    assigned: threading.Event = field(default_factory=threading.Event)

    def not_ready(self) -> str | None:
        """None when warmed up and assigned, else the reason (a readiness check)."""
        if not self.warmed_up.is_set():
            return "not warmed up"
        if not self.assigned.is_set():
            return "no Kafka partitions assigned yet"
        return None
