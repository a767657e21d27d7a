"""SASL_SSL (SCRAM-SHA-512) over TLS end to end; credentials never shown; non-root containers."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.kafka.topics import ensure_topics
from framebus.topology import INFERENCE_TOPICS, Sizing, TopicSettings, pipeline_specs
from tests.integration.kafkautil import read_topic
from tests.reliability.conftest import MODEL_INPUT
from tests.reliability.harness import Service, scrape, wait_for
from tests.reliability.secure_broker import SecureBroker, secure_broker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PORT, SASL_PORT = 23192, 23194  # controller on 23193; all below the ephemeral range
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    sb = secure_broker(PORT, SASL_PORT, tmp_path_factory.mktemp("tls"))
    sb.broker.stop()
    sb.broker.wipe()
    sb.broker.start()
    try:
        yield sb
    finally:
        sb.broker.stop()
        sb.broker.wipe()


def _secure_env(sb: SecureBroker, names: TopicSettings) -> dict[str, str]:
    return {
        "FRAMEBUS_BOOTSTRAP_SERVERS": sb.sasl_bootstrap,
        "FRAMEBUS_SECURITY_PROTOCOL": "sasl_ssl",
        "FRAMEBUS_SASL_MECHANISM": "SCRAM-SHA-512",
        "FRAMEBUS_SASL_USERNAME": sb.username,
        "FRAMEBUS_SSL_CA_LOCATION": str(sb.ca_file),
        "FRAMEBUS_FRAMES_TOPIC": names.frames_topic,
        "FRAMEBUS_DETECTIONS_TOPIC": names.detections_topic,
        "FRAMEBUS_DEADLETTER_TOPIC": names.deadletter_topic,
        "FRAMEBUS_CONSUMER_GROUP": f"g-{names.frames_topic}",
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_services_when_sasl_ssl_scram_then_frames_flow_end_to_end_and_password_never_shown(
    secure: SecureBroker, small_video: Path, square_model_160: Path, tmp_path: Path
) -> None:
    names = TopicSettings("sec.frames", "sec.detections", "sec.deadletter")
    ensure_topics(
        secure.client_settings(),
        pipeline_specs(names, Sizing(1, 1, replication_factor=1), INFERENCE_TOPICS),
    )  # over SASL_SSL too
    password_file = tmp_path / "sasl-password"
    password_file.write_text(secure.password + "\n", encoding="utf-8")
    base = _secure_env(secure, names)
    http_port = _free_port()
    inferencer = Service(
        "inferencer",
        {
            **base,
            "FRAMEBUS_SASL_PASSWORD_FILE": str(password_file),  # the Kubernetes Secret way
            "FRAMEBUS_MODEL_PATH": str(square_model_160),
            "FRAMEBUS_HTTP_PORT": str(http_port),
            "FRAMEBUS_STOP_AFTER_IDLE_S": "6",
        },
        tmp_path / "inferencer.log",
    )
    decoder = Service(
        "decoder",
        {
            **base,
            "FRAMEBUS_SASL_PASSWORD": secure.password,  # plain environment variable
            "FRAMEBUS_CAMERA_ID": "cam-sec",
            "FRAMEBUS_CAMERA_URL": str(small_video),
            "FRAMEBUS_TARGET_FPS": "5",
            "FRAMEBUS_MAX_FRAMES": "10",
            "FRAMEBUS_INPUT_WIDTH": str(MODEL_INPUT),
            "FRAMEBUS_INPUT_HEIGHT": str(MODEL_INPUT),
        },
        tmp_path / "decoder.log",
    )
    metrics: list[str] = []

    def inferred_all() -> bool:
        try:
            metrics.append(scrape(http_port))
        except OSError:
            return False
        return 'framebus_inferencer_frames_total{status="INFERRED"} 10.0' in metrics[-1]

    try:
        assert decoder.wait(60) == 0, decoder.text()[-3000:]
        wait_for(inferred_all, 60, "10 frames inferred over SASL_SSL")
        assert inferencer.wait(60) == 0, inferencer.text()[-3000:]
    finally:
        decoder.stop()
        inferencer.stop()
    records = read_topic(secure.client_settings(), names.detections_topic, 10, timeout_s=30)
    assert len(records) == 10
    for where, text in (
        ("decoder log", decoder.text()),
        ("inferencer log", inferencer.text()),
        ("metrics", metrics[-1]),
    ):
        assert secure.password not in text, f"password in the {where}"


def test_inferencer_when_password_wrong_then_clear_auth_error_without_any_password(
    secure: SecureBroker, box_model: Path, tmp_path: Path
) -> None:
    names = TopicSettings("sec.frames", "sec.detections", "sec.deadletter")
    wrong = "not-the-password-" + secure.password[::-1]
    service = Service(
        "inferencer",
        {
            **_secure_env(secure, names),
            "FRAMEBUS_SASL_PASSWORD": wrong,
            "FRAMEBUS_MODEL_PATH": str(box_model),
        },
        tmp_path / "inferencer.log",
    )
    try:
        wait_for(lambda: "Authentication failed" in service.text(), 30, "an auth error")
        assert service.alive()  # keeps retrying: credentials may be rotated under it
    finally:
        service.signal(signal.SIGTERM)
        code = service.wait(30)
    text = service.text()
    assert code == 0, text[-2000:]
    assert re.search(
        r"SASL authentication error: Authentication failed .*invalid credentials", text
    )
    assert wrong not in text and secure.password not in text


def test_settings_when_secret_file_unreadable_then_error_names_the_variable_not_the_value(
    tmp_path: Path,
) -> None:
    import os
    import subprocess
    import sys

    clean = {k: v for k, v in os.environ.items() if not k.startswith("FRAMEBUS_")}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "framebus_tools.cli", "inferencer"],
        env={
            **clean,
            "FRAMEBUS_SECURITY_PROTOCOL": "sasl_ssl",
            "FRAMEBUS_SASL_USERNAME": "alice",
            "FRAMEBUS_SASL_PASSWORD_FILE": str(tmp_path / "missing"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "FRAMEBUS_SASL_PASSWORD_FILE: cannot read the file it names" in proc.stderr
    assert time.monotonic() - started < 60


def test_kafka_settings_when_repr_or_error_then_secret_hidden() -> None:
    from framebus.settings import Secret

    settings = KafkaSettings(
        security_protocol=KafkaSettings().security_protocol.SASL_SSL,
        sasl_username="alice",
        sasl_password=Secret("hunter2-very-secret"),
    )
    assert "hunter2" not in repr(settings) and "hunter2" not in str(settings)


@pytest.mark.parametrize("service", ["decoder", "inferencer"])
def test_container_image_when_built_then_runs_as_non_root_user(service: str) -> None:
    dockerfile = (REPO / "services" / service / "Dockerfile").read_text(encoding="utf-8")
    users = re.findall(r"^USER\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert users, f"{service}/Dockerfile sets no USER: the container would run as root"
    final = users[-1].split(":")[0]
    assert final not in ("root", "0"), f"{service} runs as {users[-1]}"
