"""The one table `bench/gpu_check.sh` ends with: each gpu test, each provider chain's check and figure.

    python -m bench.gpu_summary OUT_DIR    # exit 1 if any row failed

It reads what the script leaves in OUT_DIR: `gpu-tests.xml` (pytest's junit XML of `pytest -m
gpu`), `steps.tsv` (one line a step: step, provider chain, exit status; `timeout` exits 124, or
137 when it had to kill) and `<first provider>/tune.json` (`framebus tune --output-dir`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

JUNIT = "gpu-tests.xml"
STEPS = "steps.tsv"
TIMED_OUT = (124, 137)  # timeout(1): the command ran past its limit (TERM, then KILL)
TUNE_OK = (0, 1)  # `framebus tune` exits 1 when the target load does not fit: still a figure


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    check: str
    passed: bool
    detail: str = ""

    def line(self) -> str:
        """PASS/FAIL, the check, then what it found."""
        text = f"{'PASS' if self.passed else 'FAIL':<5} {self.check}"
        return f"{text}  {self.detail}" if self.detail else text


@dataclass(frozen=True)
class Step:
    """One command the script ran, with its exit status."""

    step: str
    chain: str
    rc: int


def read_steps(path: Path) -> list[Step]:
    """The steps in the order the script ran them (none if the file is missing)."""
    if not path.is_file():
        return []
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines():
        step, chain, rc = line.split("\t")
        steps.append(Step(step, chain, int(rc)))
    return steps


def exit_note(rc: int) -> str:
    """An exit status in words."""
    return "timed out" if rc in TIMED_OUT else f"exit {rc}"


def gpu_test_rows(junit: Path, pytest_rc: int | None) -> list[Row]:
    """One row a test case of the junit XML; one failed row if pytest left none or failed else."""
    if not junit.is_file():
        why = "not run" if pytest_rc is None else exit_note(pytest_rc)
        return [Row("gpu tests", False, f"no junit XML ({why})")]
    # Our own pytest's output, not untrusted input.
    root = ElementTree.parse(junit).getroot()  # noqa: S314
    rows = []
    for case in root.iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{module}.py::{case.get('name', '?')}" if module else case.get("name", "?")
        bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if bad is None:
            rows.append(Row(name, True))
        else:
            message = (bad.get("message") or "").splitlines()
            rows.append(Row(name, False, f"{bad.tag}: {message[0][:120] if message else ''}"))
    if pytest_rc not in (None, 0) and all(r.passed for r in rows):
        rows.append(Row("gpu tests", False, f"pytest {exit_note(pytest_rc)}"))
    if not rows:
        rows.append(Row("gpu tests", False, "no test ran"))
    return rows


def capacity_line(tune_json: Path) -> str:
    """The best throughput measured and the recommended batch, from tune's JSON."""
    payload = json.loads(tune_json.read_text(encoding="utf-8"))
    best = max(payload["points"], key=lambda p: p["throughput_fps"])
    rec = payload["recommendation"]
    fits = "" if rec["fits"] else "; target does not fit"
    return (
        f"best {best['throughput_fps']:.1f} frames/s at batch {best['batch']} "
        f"(p50 {best['p50_ms']:.1f} ms, p99 {best['p99_ms']:.1f} ms); "
        f"recommended max_batch {rec['max_batch']}: {rec['throughput_fps']:.1f} frames/s, "
        f"p99 {rec['p99_ms']:.1f} ms{fits}"
    )


def chain_rows(out: Path, steps: Sequence[Step]) -> list[Row]:
    """Per provider chain: did providercheck pass, and tune's figure where it was measured."""
    rows = []
    by = {(s.step, s.chain): s.rc for s in steps}
    for chain in dict.fromkeys(s.chain for s in steps if s.step == "providercheck"):
        check_rc = by[("providercheck", chain)]
        ok = check_rc == 0
        rows.append(Row(f"providercheck {chain}", ok, "ok" if ok else exit_note(check_rc)))
        tune_rc = by.get(("tune", chain))
        tune_json = out / chain.split(",")[0] / "tune.json"
        if not ok or tune_rc is None:
            rows.append(Row(f"capacity {chain}", False, "not measured"))
        elif tune_rc not in TUNE_OK or not tune_json.is_file():
            rows.append(Row(f"capacity {chain}", False, f"no tune.json ({exit_note(tune_rc)})"))
        else:
            rows.append(Row(f"capacity {chain}", True, capacity_line(tune_json)))
    return rows


def summarise(out: Path) -> list[Row]:
    """Every row of the table, tests first."""
    steps = read_steps(out / STEPS)
    pytest_rc = next((s.rc for s in steps if s.step == "pytest"), None)
    chains = chain_rows(out, steps) or [Row("provider chains", False, "no providercheck ran")]
    return gpu_test_rows(out / JUNIT, pytest_rc) + chains


def main(argv: Sequence[str] | None = None) -> int:
    """Print the table; 1 if any row failed."""
    args = sys.argv[1:] if argv is None else list(argv)
    if len(args) != 1:
        print(__doc__)
        return 2
    rows = summarise(Path(args[0]))
    failed = sum(not r.passed for r in rows)
    print("== gpu_check summary")
    for row in rows:
        print(row.line())
    print(f"== {len(rows)} checks, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
