"""The demo's view of the clips topic: one clip record per alert, counted by status. No Kafka."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from framebus.messages import Alert, Clip

# (camera, rule, seq): what an alert and its clip record share (docs/clips.md).
AlertKey = tuple[str, str, int]


def alert_key(alert: Alert) -> AlertKey:
    """The key a clip record of this alert carries too."""
    return (alert.camera_id, alert.rule, alert.seq)


def clip_key(clip: Clip) -> AlertKey:
    """The key of the alert this clip record is of."""
    return (clip.camera_id, clip.rule, clip.seq)


class ClipTally:
    """Alerts of this run and the clip records that answered them."""

    def __init__(self) -> None:
        self._alerts: set[AlertKey] = set()
        self.clips: dict[AlertKey, Clip] = {}  # the latest record per alert (a replay rewrites)

    def add_alert(self, alert: Alert) -> None:
        """An alert of this run: a clip record is expected for it."""
        self._alerts.add(alert_key(alert))

    def add_clip(self, clip: Clip) -> None:
        """A clip record (of an alert of this run, or one the alert arrives after)."""
        self.clips[clip_key(clip)] = clip

    def pending(self) -> int:
        """Alerts of this run without a clip record yet."""
        return len(self._alerts - self.clips.keys())

    def by_status(self) -> dict[str, int]:
        """Clip records of this run's alerts, by status."""
        counts = Counter(self.clips[k].status.value for k in self._alerts if k in self.clips)
        return dict(sorted(counts.items()))

    def line(self, clips_dir: Path) -> str:
        """The summary's line: how many clips were written where, the other statuses, the missing."""
        counts = self.by_status()
        written = counts.pop("WRITTEN", 0)
        parts = [f"{written} written to {clips_dir.resolve()}"]
        parts += [f"{status} {n}" for status, n in counts.items()]
        if missing := self.pending():
            parts.append(f"{missing} alert(s) without a clip record yet")
        return ", ".join(parts)
