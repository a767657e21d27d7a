"""framebus inferencer: batch frames from Kafka through the ONNX model and publish detections.

Every flag is also a `FRAMEBUS_*` environment variable (the flag wins); SIGTERM or SIGINT stops
consuming, finishes the batches in flight, commits and exits.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from framebus.entrypoint import service_main
from framebus_inferencer.service import run
from framebus_inferencer.settings import InferencerSettings


def main(argv: Sequence[str] | None = None, prog: str = "python -m framebus_inferencer") -> int:
    """Run the inferencer until a signal stops it (or it idles out); return the exit code."""
    return service_main(prog, __doc__, InferencerSettings, run, argv)


if __name__ == "__main__":
    sys.exit(main())
