"""framebus tracker: give every detection a stable track id, one tracks record per frame.

Reads the detections topic in a consumer group (each camera at one instance), keeps one tracker per
camera, and publishes to the tracks topic; the cameras' states live in a compacted changelog topic
and are restored when a partition is assigned. Every flag is also a `FRAMEBUS_*` environment
variable (the flag wins); SIGTERM or SIGINT finishes the batch, commits and exits.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from framebus.entrypoint import service_main
from framebus_tracker.service import run
from framebus_tracker.settings import TrackerSettings


def main(argv: Sequence[str] | None = None, prog: str = "python -m framebus_tracker") -> int:
    """Run the tracker until a signal stops it (or it idles out); return the exit code."""
    return service_main(prog, __doc__, TrackerSettings, run, argv)


if __name__ == "__main__":
    sys.exit(main())
