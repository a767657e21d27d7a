"""The decoder's RSS while its broker is away: a producer backlog, bounded and given back.

A broker of its own (`--port`, stopped and started again by this program), three looping realtime
cameras of a generated 720p video at 5 fps, letterboxed to 320 (the chaos soak's decoder), and
`framebus decoder` with backpressure `block`. The broker runs for `--up-s`, is stopped for
`--down-s`, then runs again for `--after-s`; the decoder's RSS (/proc) and its frames published
and delivered (/metrics) are sampled every `--every-s`. Printed: each sample, then the median RSS
of each phase. While the broker is away the producer's queue fills up to the decoder's
`producer_queue_kbytes` and the RSS rises by about as much; a leak would not come back down once
the queue drains. Why the chaos soak leaves such samples out (docs/reliability.md). A
diagnostic: no baseline ratio, no goal.

    .venv/bin/python -m bench.diagnostics.producer_backlog_rss [--port 27500]
"""

from __future__ import annotations

import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.benchkit import fresh_topics, parser_for, print_header
from framebus.kafka.settings import KafkaSettings
from framebus.topology import Topic
from framebus_tools.localkafka import LocalKafka
from framebus_tools.process import ServiceProcess, free_port
from framebus_tools.synthetic import MovingSquare, write_square_video

CAMERAS = 3
INPUT_SIZE = 320


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _frames(port: int) -> dict[str, float]:
    """The decoder's frames by outcome, summed over its cameras (empty: no answer)."""
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "framebus_decoder_frames_total":
                outcome = sample.labels["outcome"]
                out[outcome] = out.get(outcome, 0.0) + sample.value
    return out


def main() -> None:
    """Run the three phases and print the samples and each phase's median RSS."""
    parser = parser_for(__doc__)
    parser.add_argument("--port", type=int, default=27500, help="the broker's port (its own)")
    parser.add_argument("--up-s", type=float, default=150)
    parser.add_argument("--down-s", type=float, default=40)
    parser.add_argument("--after-s", type=float, default=120)
    parser.add_argument("--every-s", type=float, default=10)
    args = parser.parse_args()
    print_header(None)
    broker = LocalKafka(port=args.port)
    broker.start()
    work = Path(tempfile.mkdtemp(prefix="backlog-rss-"))
    video = write_square_video(
        work / "v.mp4", MovingSquare(width=1280, height=720, frames=250, fps=25)
    )
    cams = [
        {"id": f"c{i}", "url": str(video), "loop": True, "realtime": True, "target_fps": 5}
        for i in range(CAMERAS)
    ]
    (work / "cameras.yaml").write_text(yaml.safe_dump({"cameras": cams}), encoding="utf-8")
    kafka = KafkaSettings(bootstrap_servers=broker.bootstrap)
    names = fresh_topics(kafka, CAMERAS, "backlog-rss", (Topic.FRAMES,))
    http = free_port()
    env = {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_CAMERAS_FILE": str(work / "cameras.yaml"),
        "FRAMEBUS_INPUT_WIDTH": str(INPUT_SIZE),
        "FRAMEBUS_INPUT_HEIGHT": str(INPUT_SIZE),
        "FRAMEBUS_BACKPRESSURE": "block",
        # The broker's absence is no camera's stall.
        "FRAMEBUS_STALL_TIMEOUT_S": str(args.down_s * 3),
        "FRAMEBUS_HTTP_PORT": str(http),
    }
    decoder = ServiceProcess("decoder", env, work / "decoder.log")
    phases: dict[str, list[float]] = {"up": [], "down": [], "after": []}
    start = time.monotonic()
    ends = {"up": args.up_s, "down": args.up_s + args.down_s}
    try:
        while (t := time.monotonic() - start) < args.up_s + args.down_s + args.after_s:
            phase = "up" if t < ends["up"] else "down" if t < ends["down"] else "after"
            if phase == "down" and broker.is_ready(1.0):
                broker.stop()
            if phase == "after" and not broker.is_ready(1.0):
                broker.start()
            rss_mib = _rss_mib(decoder.pid)
            frames = _frames(http)
            if t >= 30:  # past start-up
                phases[phase].append(rss_mib)
            print(
                f"{t:6.0f} s  {phase:5}  RSS {rss_mib:6.1f} MiB  "
                f"published {frames.get('published', 0):6.0f}  "
                f"delivered {frames.get('delivered', 0):6.0f}",
                flush=True,
            )
            time.sleep(args.every_s)
    finally:
        decoder.stop()
        broker.stop()
    for phase, values in phases.items():
        if values:
            median = statistics.median(values)
            print(f"median RSS, {phase}: {median:.0f} MiB ({len(values)} samples)")


if __name__ == "__main__":
    main()
