"""What the wheel asks pip for, and that the services start without the `tools` extra.

The service images install the wheel without extras: matplotlib and tqdm (plots and progress bar
of `framebus tune` and `loadtest`) must be in the `tools` extra only, and neither service may
import them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
TOOLS_EXTRA = {"matplotlib", "tqdm"}

# Runs a module as `python -m` would, with the tools extra's packages made unimportable.
WITHOUT_TOOLS = (
    "import runpy, sys\n"
    "for name in ('matplotlib', 'tqdm'):\n"
    "    sys.modules[name] = None  # `import name` now raises ImportError\n"
    "sys.argv = [sys.argv[1], *sys.argv[2:]]\n"
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
)


def run_without_tools(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m module args...` in a fresh interpreter that cannot import matplotlib or tqdm."""
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_TOOLS, module, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def built_wheel(tmp_path: Path) -> tuple[str, list[str], str]:
    """(METADATA, file names, build output) of a wheel built from a copy of the sources.

    A copy, so the shared tree stays clean.
    """
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache")
    for folder in ("schemas", "services", "tools"):
        shutil.copytree(REPO / folder, src / folder, symlinks=True, ignore=skip)
    out = tmp_path / "wheels"
    # No build isolation: offline, with the dev environment's setuptools (dev extra: >= 77).
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["--wheel-dir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = out.glob("framebus-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (name,) = (n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return zf.read(name).decode("utf-8"), zf.namelist(), build.stdout + build.stderr


def test_wheel_when_built_then_tools_extra_apart_and_live_page_files_declared(
    tmp_path: Path,
) -> None:
    text, names, output = built_wheel(tmp_path)
    metadata = Parser().parsestr(text)
    requires = [Requirement(r) for r in metadata.get_all("Requires-Dist") or []]
    by_name = {r.name.lower(): r for r in requires}
    assert "prometheus-client" in by_name and by_name["prometheus-client"].marker is None
    for name in TOOLS_EXTRA:
        assert str(by_name[name].marker) == 'extra == "tools"', by_name[name]
    core = {r.name.lower() for r in requires if r.marker is None}
    assert not core & TOOLS_EXTRA
    assert "tools" in (metadata.get_all("Provides-Extra") or [])
    dev = [r for r in requires if r.marker is not None and r.marker.evaluate({"extra": "dev"})]
    assert any(r.name == "framebus" and r.extras == {"tools"} for r in dev)  # `make install`
    # The live page's files ship in the wheel, declared so setuptools has nothing to warn of.
    for page in ("index.html", "login.html", "live.js", "live.css"):
        assert f"framebus_live/static/{page}" in names
    assert "Package would be ignored" not in output


@pytest.mark.parametrize(
    ("module", "flag"),
    [
        ("framebus_decoder", "--camera-url"),
        ("framebus_inferencer", "--max-batch"),
        ("framebus_live", "--tile-fps"),
    ],
)
def test_service_entry_point_when_tools_extra_missing_then_help_exits_0(
    module: str, flag: str
) -> None:
    done = run_without_tools(module, "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"usage: python -m {module}")
    assert flag in done.stdout and "FRAMEBUS_" in done.stdout


def test_shim_when_a_module_imports_matplotlib_then_it_fails() -> None:
    # The check above could not fail if the shim did not really hide the tools extra.
    done = run_without_tools("matplotlib")
    assert done.returncode != 0 and "ImportError" in done.stderr


def test_framebus_topics_when_tools_extra_missing_then_help_exits_0() -> None:
    # The topics Job runs `framebus topics create` from the decoder image, which has no extra.
    done = run_without_tools("framebus_tools.cli", "topics", "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "--frames-partitions" in done.stdout


@pytest.mark.parametrize("command", ["tune", "loadtest"])
def test_framebus_perf_command_when_tools_extra_missing_then_exit_2_naming_the_extra(
    command: str,
) -> None:
    done = run_without_tools("framebus_tools.cli", command)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"framebus {command}: error:" in done.stderr
    assert "pip install 'framebus[tools]'" in done.stderr
    assert "Traceback" not in done.stderr
