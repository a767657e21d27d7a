"""CI's own guards: a private home, a free test port, a Java that runs Kafka 4."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ci_run_when_test_port_taken_then_fails_naming_the_port(tmp_path: Path) -> None:
    # A copy in an empty tree: should the guard ever let it through, it finds nothing to wipe.
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        done = subprocess.run(
            ["bash", str(tmp_path / ".ci" / "run")],
            env={**os.environ, "FRAMEBUS_TEST_KAFKA_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert f"port {port} is already taken" in done.stderr


def test_install_test_deps_when_java_older_than_17_then_fails_saying_so(tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\necho 'openjdk version \"1.8.0_402\"' >&2\n", encoding="utf-8")
    java.chmod(0o755)
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "install-test-deps.sh")],
        env={**os.environ, "JAVA_HOME": str(tmp_path / "jdk")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "needs Java 17 or newer" in done.stderr and "is Java 8" in done.stderr
