"""framebus clips: an MP4 clip and a JPEG snapshot of every alert, cut from the video topic.

Reads the alerts topic in its own consumer group; for each alert, reads the camera's packets
around the alert's capture time from the video topic (waiting for a post-roll still to come),
remuxes them to <clips_dir>/<camera>/<name>.mp4 without re-encoding, draws the alert's boxes on
its frame from the frames topic (<name>.jpg), and publishes one record per alert to the clips
topic, in the same transaction as the alert's offset. Every flag is also a `FRAMEBUS_*`
environment variable (the flag wins); SIGTERM or SIGINT finishes the alert at hand and exits.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from framebus.entrypoint import service_main
from framebus_clips.service import run
from framebus_clips.settings import ClipsSettings


def main(argv: Sequence[str] | None = None, prog: str = "python -m framebus_clips") -> int:
    """Run the clips service until a signal stops it (or it idles out); return the exit code."""
    return service_main(prog, __doc__, ClipsSettings, run, argv)


if __name__ == "__main__":
    sys.exit(main())
