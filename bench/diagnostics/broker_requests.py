"""How long the local broker took over each request, from its own request log, per topic.

A benchmark's slow run can be framebus's doing or the broker's. Kafka's request logger, at DEBUG,
writes one "Completed request" line per request with where its time went: queued for a request
handler (requestQueueTimeMs), handled (localTimeMs: for a produce, the log append), waiting for
other replicas (remoteTimeMs), queued for the network thread, sent. This reads those lines from an
embedded broker's log (`framebus kafka start`) and summarises them per topic: each run of
`bench.capacity` has topics of its own, so each run is one line. A diagnostic: no baseline, no
goal. The logger's level is changed on the running broker (Kafka's `kafka-configs --entity-type
broker-loggers`, run with the embedded broker's own jars); a broker restart sets it back to WARN.

    .venv/bin/python -m bench.diagnostics.broker_requests --port 29092 --enable   # logger to DEBUG
    .venv/bin/python -m bench.diagnostics.broker_requests --port 29092 [--api PRODUCE]
        [--topic .detections] [--slow-ms 30]
    .venv/bin/python -m bench.diagnostics.broker_requests --port 29092 --disable  # back to WARN
"""

from __future__ import annotations

import json
import statistics
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.benchkit import command_line, parser_for
from framebus_tools.localkafka import NODE_ID, LocalKafka

MARK = "Completed request:"
PHASES = ("requestQueueTimeMs", "localTimeMs", "remoteTimeMs", "responseQueueTimeMs", "sendTimeMs")


def set_request_logging(broker: LocalKafka, level: str) -> None:
    """Set the running broker's `kafka.request.logger` level (DEBUG logs every request)."""
    command = broker.tool_command(
        "kafka.admin.ConfigCommand",
        "--bootstrap-server",
        broker.bootstrap,
        "--entity-type",
        "broker-loggers",
        "--entity-name",
        NODE_ID,
        "--alter",
        "--add-config",
        f"kafka.request.logger={level}",
    )
    subprocess.run(command, check=True, timeout=120)  # noqa: S603 - the broker's own tool


def completed_requests(logs: list[Path], api: str) -> Iterator[dict[str, Any]]:
    """The request log's entries of one API (e.g. PRODUCE), oldest log file first."""
    for path in logs:
        with path.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                at = line.find(MARK)
                if at < 0 or f'"requestApiKeyName":"{api}"' not in line:
                    continue
                entry: dict[str, Any] = json.loads(line[at + len(MARK) : line.rindex("}") + 1])
                entry["logged_at"] = line[1:24]
                yield entry


def topics_of(entry: dict[str, Any]) -> list[str]:
    """The topics a request names (a produce's topicData, an offset commit's topics).

    A fetch of version 13 or later names its topics by id, which is what is shown for it.
    """
    request = entry.get("request") or {}
    listed = request.get("topicData") or request.get("topics") or []
    return [t.get("name") or t.get("topic") or t.get("topicId") or "?" for t in listed]


def summarise(entries: Iterator[dict[str, Any]], topic_part: str, slow_ms: float) -> None:
    """One line per topic: requests, total time p50/p99/max, and where the slow ones' time went."""
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    first: dict[str, str] = {}
    for entry in entries:
        for topic in topics_of(entry):
            if topic_part in topic:
                by_topic[topic].append(entry)
                first.setdefault(topic, entry["logged_at"])
    print(
        f"{'first request':23} {'topic':32} {'n':>5} {'p50':>6} {'p99':>6} {'max':>6}"
        f" {'slow':>5}  slow ones: median ms per phase ({', '.join(PHASES)})"
    )
    for topic in sorted(by_topic, key=first.__getitem__):
        rows = by_topic[topic]
        totals = sorted(r["totalTimeMs"] for r in rows)
        slow = [r for r in rows if r["totalTimeMs"] > slow_ms]
        phases = (
            " / ".join(f"{statistics.median(r[p] for r in slow):.1f}" for p in PHASES)
            if slow
            else "-"
        )
        print(
            f"{first[topic]:23} {topic[-32:]:32} {len(rows):>5} {totals[len(totals) // 2]:>6.1f}"
            f" {totals[int(len(totals) * 0.99)]:>6.1f} {totals[-1]:>6.1f} {len(slow):>5}  {phases}"
        )


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--port", type=int, default=29092, help="the embedded broker's port")
    parser.add_argument("--enable", action="store_true", help="request logger to DEBUG, exit")
    parser.add_argument("--disable", action="store_true", help="request logger to WARN, exit")
    parser.add_argument("--api", default="PRODUCE", help="request type, e.g. PRODUCE, FETCH")
    parser.add_argument("--topic", default="", help="only topics whose name contains this")
    parser.add_argument("--slow-ms", type=float, default=30.0, help="a slow request's total")
    args = parser.parse_args()
    broker = LocalKafka(port=args.port)
    if args.enable or args.disable:
        set_request_logging(broker, "DEBUG" if args.enable else "WARN")
        return 0
    # log4j2 numbers rolled files oldest first (server.log.1), the live one last
    logs = sorted(broker.log_file.parent.glob("server.log.*")) + [broker.log_file]
    print("command:", command_line())
    summarise(completed_requests(logs, args.api), args.topic, args.slow_ms)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
