"""Logging set-up: one JSON object per line, with camera id and trace id when the record has them."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

from opentelemetry import trace

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Format records as single-line JSON; extra fields (camera_id, trace_id, ...) are kept."""

    def format(self, record: logging.LogRecord) -> str:
        """Render one record."""
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, int | float | str | bool) else str(value)
        if "trace_id" not in out:
            span_ctx = trace.get_current_span().get_span_context()
            if span_ctx.is_valid:
                out["trace_id"] = format(span_ctx.trace_id, "032x")
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(level: str = "info", json_lines: bool = True) -> None:
    """Send logs to stderr, as JSON lines (services) or plain text (interactive commands)."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
