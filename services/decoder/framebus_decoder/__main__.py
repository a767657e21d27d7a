"""framebus decoder: decode camera streams and publish letterboxed frame tensors to Kafka.

Every flag is also a `FRAMEBUS_*` environment variable (the flag wins); SIGTERM or SIGINT stops
the cameras, flushes the producer and exits.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from framebus.entrypoint import service_main
from framebus_decoder.service import run
from framebus_decoder.settings import DecoderSettings


def main(argv: Sequence[str] | None = None, prog: str = "python -m framebus_decoder") -> int:
    """Run the decoder until its cameras end or a signal stops it; return the exit code."""
    return service_main(prog, __doc__, DecoderSettings, run, argv)


if __name__ == "__main__":
    sys.exit(main())
