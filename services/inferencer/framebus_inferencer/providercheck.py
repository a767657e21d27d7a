"""`python -m framebus_inferencer.providercheck`: whether the provider asked for is the one that runs.

`onnxruntime.get_available_providers()` lists what the wheel was built with, so a check on it
passes where TensorRT's libraries are missing. Two checks instead:

- `--libraries tensorrt,cuda`: each provider's library and everything it links resolve (`ldd`;
  the NVIDIA driver aside, which the host mounts at run time), so an image build with no GPU
  can check it; exit 1 naming what is missing and LD_LIBRARY_PATH.
- `--model M --providers tensorrt,cuda,cpu`: load and run M as the inferencer does; exit 1
  unless the session's first provider is the first asked for, loaded as asked, and it ran the
  graph (bench/gpu_check.sh runs it before measuring; it needs the GPU).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from framebus.errors import FramebusError
from framebus_inferencer.fallback import ProviderMismatch
from framebus_inferencer.providerlibs import LIBRARIES, missing_libraries
from framebus_inferencer.settings import Provider


def engine_problems(
    asked: str, registered: str, ran: str, fallbacks: Sequence[ProviderMismatch]
) -> list[str]:
    """What differs from running on `asked`: the registered provider, the one that ran, fallbacks."""
    problems = [str(m) for m in fallbacks]
    if registered != asked:
        problems.append(f"the session's first provider is {registered}, not {asked}")
    if ran != asked:
        problems.append(f"{ran} ran the graph, not {asked}")
    return problems


def check_libraries(names: Sequence[str]) -> list[str]:
    """Problems with the provider libraries of `names` (tensorrt, cuda)."""
    problems = []
    for name in names:
        provider = Provider(name).ort_name
        if provider not in LIBRARIES:
            continue
        missing = missing_libraries(provider)
        if missing:
            problems.append(f"{provider}: {', '.join(missing)} not found")
    return problems


def check_engine(model: Path, names: Sequence[str], trt_cache_dir: Path) -> tuple[str, list[str]]:
    """Load `model` on the chain `names`, run it once; a summary line and the problems found."""
    from framebus_inferencer.engine import Engine
    from framebus_inferencer.providers import EngineOptions

    providers = tuple(Provider(n) for n in names)
    engine = Engine(model, EngineOptions(providers=providers, trt_cache_dir=trt_cache_dir))
    frame = np.zeros(engine.info.frame_shape, np.uint8)
    engine.infer([frame])  # the profiled first run
    asked = providers[0].ort_name
    limit = engine.memory_limit
    summary = (
        f"asked {asked}; registered {list(engine.session.get_providers())}; ran the graph: "
        f"{engine.graph_provider}; memory limit {limit.limit_bytes} bytes, enforced by "
        f"{limit.enforced_by.value}, excludes {limit.excludes}"
    )
    return summary, engine_problems(asked, engine.provider, engine.graph_provider, engine.fallbacks)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks asked for; 0 when every one passes."""
    parser = argparse.ArgumentParser(prog="python -m framebus_inferencer.providercheck")
    parser.add_argument("--libraries", default="", help="e.g. tensorrt,cuda")
    parser.add_argument("--model", type=Path, help="ONNX model to load and run once")
    parser.add_argument("--providers", default="tensorrt,cuda,cpu")
    parser.add_argument("--trt-cache-dir", type=Path, default=Path("gpu-check-output/trt-cache"))
    args = parser.parse_args(argv)
    problems: list[str] = []
    if args.libraries:
        problems += check_libraries([n for n in args.libraries.split(",") if n])
    if args.model is not None:
        try:
            summary, found = check_engine(args.model, args.providers.split(","), args.trt_cache_dir)
        except (FramebusError, ValueError) as exc:
            summary, found = "", [str(exc)]
        if summary:
            print(summary)
        problems += found
    for problem in problems:
        print(f"providercheck: {problem}", file=sys.stderr)
    if problems:
        path = os.environ.get("LD_LIBRARY_PATH") or "(unset)"
        print(f"providercheck: FAILED (LD_LIBRARY_PATH={path})", file=sys.stderr)
        return 1
    print("providercheck: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
