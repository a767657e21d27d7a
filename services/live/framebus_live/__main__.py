"""framebus live: a web page of every camera with its boxes, tracks, figures and alerts.

Reads the frames, tracks (or detections) and alerts topics in consumer groups of its own, from the
latest end, committing nothing; serves the page at http://<host>:<http-port>/, one WebSocket per
page, /mjpeg/<camera> streams, /healthz, /readyz and /metrics. Every flag is also a `FRAMEBUS_*`
environment variable (the flag wins); SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from framebus.entrypoint import service_main
from framebus_live.service import run
from framebus_live.settings import LiveSettings


def main(argv: Sequence[str] | None = None, prog: str = "python -m framebus_live") -> int:
    """Serve the live page until a signal stops it; return the exit code."""
    return service_main(prog, __doc__, LiveSettings, run, argv)


if __name__ == "__main__":
    sys.exit(main())
