"""Debian's chromium as the browser tests and `bench.live` start it, driven by Playwright.

Playwright cannot download a browser of its own here, so it is handed Debian's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

INSTALL_HINT = (
    "needs Debian's chromium: run scripts/install-test-deps.sh as root "
    "(apt-get install -y --no-install-recommends chromium)"
)
CHROMIUM_ARGS = [
    "--no-sandbox",  # the tests run as root in CI
    "--headless",
    "--disable-gpu",
    # Without these, chromium's calls home are refused by a closed network, many at a time.
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """Debian's chromium, or None when it is not installed."""
    found = shutil.which("chromium")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    return found
