"""What an idle `framebus inferencer` and the broker cost per second, per process.

`framebus inferencer` (near-free model, a fresh empty frames topic, `--workers N` for each N
given) is started, left to settle for `--settle-s`, then each of its processes' CPU (/proc) is
read over `--window-s`; the local broker's idle CPU is read alone first. What idle wake-ups
(queue polls, probes, librdkafka's timers) cost, which a drain paced by its arrivals charges to
its frames. A diagnostic: no baseline ratio, no goal.

    .venv/bin/python -m bench.diagnostics.idle_cpu [--workers 1 2] [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import onnx

from bench.benchkit import (
    add_bootstrap_argument,
    broker_pids,
    delete_topics,
    fresh_topics,
    host_usage,
    inferencer_env,
    parser_for,
    print_header,
    process_usage,
)
from framebus.kafka.settings import KafkaSettings
from framebus_tools.process import ServiceProcess
from testkit.models import near_free_model


def idle_ms_per_s(pids: list[int], window_s: float) -> dict[int, float]:
    """Each process's CPU over `window_s`, in ms a second."""
    before = {pid: (process_usage(pid) or (0.0, 0))[0] for pid in pids}
    t0 = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - t0
    after = {pid: (process_usage(pid) or (0.0, 0))[0] for pid in pids}
    return {pid: (after[pid] - before[pid]) * 1000 / elapsed for pid in pids}


def main() -> None:
    """Print the broker's idle CPU, then each inferencer process's for each --workers N."""
    parser = parser_for(__doc__)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--settle-s", type=float, default=25.0)
    parser.add_argument("--window-s", type=float, default=30.0)
    add_bootstrap_argument(parser)
    args = parser.parse_args()
    print_header()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    brokers = broker_pids(kafka.bootstrap_servers)
    b0 = host_usage(brokers)[1]
    time.sleep(args.window_s / 3)
    print(f"broker, idle: {(host_usage(brokers)[1] - b0) * 3000 / args.window_s:.1f} ms/s")
    with tempfile.TemporaryDirectory() as work:
        model = Path(work) / "near-free-640.onnx"
        onnx.save(near_free_model(640), str(model))
        for n in args.workers:
            names = fresh_topics(kafka, 16, prefix="idle")
            env = {**inferencer_env(kafka, names, model, 16), "FRAMEBUS_STOP_AFTER_IDLE_S": "0"}
            env["FRAMEBUS_WORKERS"] = str(n)
            proc = ServiceProcess("inferencer", env, Path(work) / f"idle-{n}.log")
            try:
                time.sleep(args.settle_s)
                children = subprocess.run(
                    ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=False
                ).stdout.split()
                pids = [proc.pid, *(int(c) for c in children)]
                costs = idle_ms_per_s(pids, args.window_s)
            finally:
                proc.stop()
                delete_topics(kafka, names)
            parts = ", ".join(f"{costs[p]:.1f}" for p in pids)
            role = "the process" if n == 1 else "the supervisor, then each worker"
            print(f"--workers {n}: {sum(costs.values()):.1f} ms/s in all ({role}: {parts})")


if __name__ == "__main__":
    main()
