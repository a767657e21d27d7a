"""framebus alerts: rules on objects (dwell, line counts, zone enter/exit, occupancy) and frames.

Reads the tracks topic (or the detections topic, for frame rules only) in a consumer group, keeps
each camera's rule state, and publishes one record per alert to the alerts topic; the states live
in a compacted changelog topic and are restored when a partition is assigned. Every flag is also a
`FRAMEBUS_*` environment variable (the flag wins); SIGTERM or SIGINT finishes the batch, commits
and exits.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from framebus.entrypoint import service_main
from framebus_alerts.service import run
from framebus_alerts.settings import AlertsSettings


def main(argv: Sequence[str] | None = None, prog: str = "python -m framebus_alerts") -> int:
    """Run the alerts service until a signal stops it (or it idles out); return the exit code."""
    return service_main(prog, __doc__, AlertsSettings, run, argv)


if __name__ == "__main__":
    sys.exit(main())
