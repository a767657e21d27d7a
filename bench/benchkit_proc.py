"""CPU seconds and page faults from /proc (Linux): of a process, its children, the host, the broker.

The benchmarks subtract these counters over a measured window, so that a ratio can say how much
of the host's CPU went to the process measured, how much to the local Kafka broker, and how much
to everything else running at the same time.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def process_usage(pid: int) -> tuple[float, int] | None:
    """User + system CPU seconds and minor page faults of a running process; None once gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) * TICK_S, int(fields[7])


def process_tree_usage(pid: int) -> tuple[float, int] | None:
    """CPU seconds and minor page faults of a process and its children; None once it is gone.

    `framebus inferencer --workers N` is a supervisor and N worker processes: this is their CPU
    together. A child that ended and was reaped stays counted, in the parent's cutime/cstime.
    """
    own = _stat_fields(pid)
    if own is None:
        return None
    cpu = (int(own[11]) + int(own[12]) + int(own[13]) + int(own[14])) * TICK_S
    faults = int(own[7]) + int(own[8])
    children: set[int] = set()
    with contextlib.suppress(OSError):  # the kernel lists each thread's children (Linux 3.5+)
        for task in Path(f"/proc/{pid}/task").iterdir():
            children.update(int(c) for c in (task / "children").read_text().split())
    for child in children:
        usage = process_usage(child)
        if usage is not None:
            cpu, faults = cpu + usage[0], faults + usage[1]
    return cpu, faults


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (which may hold spaces); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def listening_pids(port: int) -> list[int]:
    """The processes with a socket listening on TCP `port` (any address); [] if none is seen."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                    inodes.add(f"socket:[{cols[9]}]")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                pids.append(int(entry.name))
    return pids


def broker_pids(bootstrap: str | None = None) -> list[int]:
    """The local Kafka broker's process: the one serving `bootstrap`'s port when one does.

    Other brokers on the host (other suites' and engineers') are left out; without `bootstrap`,
    or when no process is seen listening on its port, every `kafka.Kafka` process (`framebus kafka
    start` runs that class) is counted.
    """
    if bootstrap:
        host_port = bootstrap.split(",")[0]
        serving = listening_pids(int(host_port.rsplit(":", 1)[1]))
        if serving:
            return serving
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            if b"kafka.Kafka" in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


def host_usage(brokers: list[int]) -> tuple[float, float]:
    """Busy CPU seconds of the whole host (all cores) and of the brokers: counters to subtract.

    Busy is wall time x cores less /proc/stat's idle and iowait, which the kernel measures
    exactly (the busy states are sampled by timer tick), so time stolen by other tenants counts.
    """
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = time.time() * CORES - (fields[3] + fields[4]) * TICK_S
    broker = 0.0
    for pid in brokers:
        usage = process_usage(pid)
        broker += usage[0] if usage is not None else 0.0
    return busy, broker


def others_cores(
    host_s: float, own_s: float, broker_s: float, window_s: float
) -> tuple[float, float]:
    """The broker's and the rest of the host's CPU over a window, in cores.

    The rest is the host's busy CPU less the measured process's own (`own_s`) and the broker's.
    """
    return broker_s / window_s, (host_s - own_s - broker_s) / window_s
