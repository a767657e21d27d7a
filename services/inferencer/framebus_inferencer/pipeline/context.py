"""What every stage of one pipeline is given: settings, control, stats, run state, tracing, clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from framebus.telemetry.health import Health
from framebus_inferencer.pipeline.control import Control
from framebus_inferencer.pipeline.tracing import BatchTracing
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.state import RunState
from framebus_inferencer.stats import InferencerStats


def monotonic_ms() -> float:
    """The batcher's clock: monotonic milliseconds."""
    return time.monotonic() * 1000


@dataclass(frozen=True)
class StageContext:
    """Shared by the receive, infer and publish stages of one pipeline.

    Each member has one owner and a narrow API: the settings are frozen, `control` signals stop
    and failure, `stats` only counts (metrics read it), `state` is the run's control state.
    """

    settings: InferencerSettings
    control: Control
    stats: InferencerStats = field(default_factory=InferencerStats)
    state: RunState = field(default_factory=RunState)
    tracing: BatchTracing = field(default_factory=lambda: BatchTracing("", ""))
    clock_ms: Callable[[], float] = monotonic_ms


def stage_context(
    settings: InferencerSettings,
    stats: InferencerStats | None = None,
    health: Health | None = None,
    state: RunState | None = None,
    clock_ms: Callable[[], float] = monotonic_ms,
) -> StageContext:
    """A pipeline's context: its control watched by `health`, tracing on the frames topic."""
    return StageContext(
        settings,
        Control(health or Health(), settings.stage_timeout_s),
        stats or InferencerStats(),
        state or RunState(),
        BatchTracing(settings.topics.frames_topic, settings.consumer_group),
        clock_ms,
    )
