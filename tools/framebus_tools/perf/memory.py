"""What `framebus tune` measures as peak memory: this process's GPU memory (NVML), or host RSS.

On a GPU provider the figure is this process's memory on the GPU when NVML lists the process,
else every process's on that GPU, said as such; without NVML it is host RSS, said as such.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from framebus_inferencer.gpu import gpu_memory, why_no_memory

GPU_MEMORY = "gpu"
HOST_RSS = "host_rss"


@dataclass(frozen=True)
class MemorySource:
    """What tune's peak memory figures are: GPU memory in use (NVML) or this process's RSS."""

    kind: str  # GPU_MEMORY or HOST_RSS
    note: str  # what was measured, and why host memory on a GPU provider

    @property
    def column(self) -> str:
        """The table's header for the peak memory column."""
        return "GPU MB" if self.kind == GPU_MEMORY else "RSS MB"


def gpu_used_mb() -> float | None:
    """GPU memory of this process on CUDA device 0 (NVML), MB, else every process's on it.

    None without an NVIDIA GPU and nvidia-ml-py. The device is looked up as CUDA numbers it
    (framebus_inferencer.gpu), not by NVML's index.
    """
    found = gpu_memory(0)
    if found is None:
        return None
    used = found.device_used if found.process_used is None else found.process_used
    return used / 1e6


def memory_source(provider: str) -> MemorySource:
    """GPU memory on a GPU provider when NVML answers, else host RSS, with a note saying which."""
    if provider == "CPUExecutionProvider":
        return MemorySource(HOST_RSS, "peak memory is this process's host RSS (CPU provider)")
    found = gpu_memory(0)
    if found is not None and found.process_used is not None:
        return MemorySource(
            GPU_MEMORY, "peak memory is this process's GPU memory on CUDA device 0 (NVML)"
        )
    if found is not None:
        return MemorySource(
            GPU_MEMORY,
            "peak memory is GPU memory in use on CUDA device 0 by every process, not this one "
            f"alone: {found.process_note}",
        )
    return MemorySource(
        HOST_RSS,
        f"peak memory is this process's host RSS, NOT GPU memory: {provider} runs on the GPU "
        f"but {why_no_memory(0)}",
    )


def memory_mb(source: MemorySource) -> float:
    """The memory `source` measures now, MB."""
    if source.kind == GPU_MEMORY:
        # NVML answered at the start: a failed read adds nothing to the peak, no host RSS mixed in.
        used = gpu_used_mb()
        return 0.0 if used is None else used
    return rss_mb()


def rss_mb() -> float:
    """Resident memory of this process, MB (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
