"""bench/gpu_check.sh's table (bench/gpu_summary.py) on a real pytest junit XML and tune output."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bench.gpu_summary import JUNIT, STEPS, main, summarise
from framebus_tools.perf.tune import TuneSettings, run_tune
from framebus_tools.perf.tunereport import write_outputs

TESTS = """
def test_device_when_asked_then_answers():
    assert 1 + 1 == 2

def test_device_when_asked_then_wrong():
    assert 1 + 1 == 3, "the device said three"
"""


class SlowRunner:
    """A runner that takes 0.2 ms a frame on the CPU provider: tune measures it for real."""

    input_height = 8
    input_width = 8
    provider = "CPUExecutionProvider"

    def infer(self, frames: npt.NDArray[np.uint8]) -> None:
        """Sleep as long as the frames would take."""
        time.sleep(0.0002 * len(frames))


def pytest_junit(out: Path, tests: str = TESTS) -> int:
    """Run pytest on `tests` (by default two, one failing) in their own directory; junit XML
    into `out`; return pytest's exit status."""
    project = out.parent / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (project / "test_device.py").write_text(tests, encoding="utf-8")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*args, "--junitxml", str(out / JUNIT), "test_device.py"],
        cwd=project,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return done.returncode


def tune_output(out: Path, chain: str) -> None:
    """What `framebus tune --output-dir OUT/<first provider>` writes, for a short real run."""
    settings = TuneSettings(
        max_batch_limit=4,
        seconds_per_batch=0.05,
        latency_budget_ms=1000,
        cameras=4,
        fps=5,
        compare_layouts=False,
        output_dir=out / chain.split(",", maxsplit=1)[0],
    )
    write_outputs(run_tune(settings, lambda _threads: SlowRunner(), lambda _step: None), settings)


def steps(out: Path, *lines: tuple[str, str, int]) -> None:
    """The script's steps.tsv."""
    text = "".join(f"{s}\t{c}\t{rc}\n" for s, c, rc in lines)
    (out / STEPS).write_text(text, encoding="utf-8")


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "gpu-check-output"
    path.mkdir()
    return path


def test_summary_when_a_test_and_a_chain_fail_then_one_row_each_and_exit_1(
    out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = pytest_junit(out)
    tune_output(out, "tensorrt,cuda,cpu")
    steps(
        out,
        ("pytest", "all", rc),
        ("providercheck", "tensorrt,cuda,cpu", 0),
        ("tune", "tensorrt,cuda,cpu", 1),  # target does not fit: still a figure
        ("providercheck", "cuda,cpu", 1),
    )
    rows = {r.check: r for r in summarise(out)}
    assert rows["test_device.py::test_device_when_asked_then_answers"].passed
    wrong = rows["test_device.py::test_device_when_asked_then_wrong"]
    assert not wrong.passed and "the device said three" in wrong.detail
    assert rows["providercheck tensorrt,cuda,cpu"].passed
    capacity = rows["capacity tensorrt,cuda,cpu"]
    assert capacity.passed and capacity.detail.startswith("best ")
    assert "frames/s at batch" in capacity.detail and "recommended max_batch" in capacity.detail
    assert not rows["providercheck cuda,cpu"].passed
    assert rows["capacity cuda,cpu"].detail == "not measured"
    assert main([str(out)]) == 1
    printed = capsys.readouterr().out
    assert "FAIL  test_device.py::test_device_when_asked_then_wrong" in printed
    assert printed.rstrip().endswith("== 6 checks, 3 failed")


def test_summary_when_every_test_and_chain_passes_then_exit_0(out: Path) -> None:
    rc = pytest_junit(out, TESTS.split("\n\ndef", maxsplit=1)[0] + "\n")
    for chain in ("tensorrt,cuda,cpu", "cuda,cpu"):
        tune_output(out, chain)
    steps(
        out,
        ("pytest", "all", rc),
        *((s, c, 0) for c in ("tensorrt,cuda,cpu", "cuda,cpu") for s in ("providercheck", "tune")),
    )
    assert [r.passed for r in summarise(out)] == [True] * 5
    assert main([str(out)]) == 0


def test_summary_when_steps_timed_out_then_failed_rows_say_so(out: Path) -> None:
    # pytest killed before it wrote its XML; tune killed before it wrote tune.json.
    steps(
        out,
        ("pytest", "all", 124),
        ("providercheck", "cuda,cpu", 0),
        ("tune", "cuda,cpu", 137),
    )
    assert [(r.check, r.passed, r.detail) for r in summarise(out)] == [
        ("gpu tests", False, "no junit XML (timed out)"),
        ("providercheck cuda,cpu", True, "ok"),
        ("capacity cuda,cpu", False, "no tune.json (timed out)"),
    ]
    assert main([str(out)]) == 1


def test_summary_when_nothing_ran_then_it_fails(out: Path) -> None:
    assert [(r.check, r.passed) for r in summarise(out)] == [
        ("gpu tests", False),
        ("provider chains", False),
    ]
