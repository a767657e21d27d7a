"""framebus inferencer: batch frames from Kafka through the ONNX model and publish detections.

Every flag is also a `FRAMEBUS_*` environment variable (the flag wins); SIGTERM or SIGINT stops
consuming, finishes the batches in flight, commits and exits.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from framebus.entrypoint import service_main
from framebus_inferencer.service import run
from framebus_inferencer.settings import InferencerSettings
from framebus_inferencer.workers import become_worker, supervise


def main(argv: Sequence[str] | None = None, prog: str = "python -m framebus_inferencer") -> int:
    """Run the inferencer until a signal stops it (or it idles out); return the exit code.

    With `--workers N` (N > 1) this process supervises N inferencer processes, each started
    with these same arguments (`framebus_inferencer.workers`).
    """
    args = list(sys.argv[1:] if argv is None else argv)

    def run_service(settings: InferencerSettings, stop: threading.Event) -> int:
        if settings.workers > 1:
            return supervise(settings, stop, args)
        if settings.worker_index is not None:
            become_worker(settings.worker_index, stop)
        return run(settings, stop)

    return service_main(prog, __doc__, InferencerSettings, run_service, args)


if __name__ == "__main__":
    sys.exit(main())
