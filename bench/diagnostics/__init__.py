"""One-off diagnostics: where a benchmark's time or the broker's CPU goes (see ../README.md)."""
