import argparse
import enum
from dataclasses import dataclass

import pytest

from framebus import settings as cfg
from framebus.errors import ConfigError
from framebus.kafka.settings import KafkaSettings, SecurityProtocol
from framebus.settings import Secret, setting


class Mode(enum.Enum):
    FAST = "fast"
    SAFE = "safe"


@dataclass(frozen=True)
class Sample:
    max_batch: int = setting(8, "batch")
    ratio: float = setting(0.5, "ratio")
    mode: Mode = setting(Mode.SAFE, "mode")
    token: Secret | None = setting(None, "token")
    names: tuple[str, ...] = setting(("a",), "names")

    def __post_init__(self) -> None:
        cfg.check(self.max_batch >= 1, "max_batch", "must be >= 1")


def test_load_when_env_and_flags_then_flags_win_over_env_over_defaults() -> None:
    parser = argparse.ArgumentParser()
    cfg.add_arguments(parser, Sample)
    args = parser.parse_args(["--max-batch", "16"])
    env = {"FRAMEBUS_MAX_BATCH": "4", "FRAMEBUS_MODE": "fast", "FRAMEBUS_NAMES": "x, y"}
    loaded = cfg.load(Sample, env, args)
    assert loaded == Sample(max_batch=16, mode=Mode.FAST, names=("x", "y"))


def test_load_when_value_invalid_then_error_names_variable_and_flag() -> None:
    with pytest.raises(ConfigError, match=r"FRAMEBUS_MAX_BATCH \(--max-batch\).*'eight'"):
        cfg.load(Sample, {"FRAMEBUS_MAX_BATCH": "eight"})
    with pytest.raises(ConfigError, match=r"FRAMEBUS_MAX_BATCH \(--max-batch\): must be >= 1"):
        cfg.load(Sample, {"FRAMEBUS_MAX_BATCH": "0"})
    with pytest.raises(ConfigError, match="expected one of fast, safe"):
        cfg.load(Sample, {"FRAMEBUS_MODE": "turbo"})


def test_secret_when_printed_or_in_error_then_value_hidden(tmp_path) -> None:  # type: ignore[no-untyped-def]
    loaded = cfg.load(Sample, {"FRAMEBUS_TOKEN": "hunter2"})
    assert loaded.token is not None and loaded.token.reveal() == "hunter2"
    assert "hunter2" not in repr(loaded) and "hunter2" not in str(loaded)
    secret_file = tmp_path / "token"
    secret_file.write_text("from-file\n")
    assert cfg.load(Sample, {"FRAMEBUS_TOKEN_FILE": str(secret_file)}).token == Secret("from-file")


def test_kafka_settings_when_sasl_ssl_then_client_config_carries_credentials() -> None:
    s = cfg.load(
        KafkaSettings,
        {
            "FRAMEBUS_SECURITY_PROTOCOL": "sasl_ssl",
            "FRAMEBUS_SASL_USERNAME": "u",
            "FRAMEBUS_SASL_PASSWORD": "p4ss",
            "FRAMEBUS_SSL_CA_LOCATION": "/ca.pem",
        },
    )
    assert s.security_protocol is SecurityProtocol.SASL_SSL
    conf = s.client_config()
    assert conf["sasl.password"] == "p4ss"
    assert conf["ssl.ca.location"] == "/ca.pem"
    assert "p4ss" not in repr(s)


def test_kafka_settings_when_sasl_without_password_then_rejected() -> None:
    with pytest.raises(ConfigError, match="FRAMEBUS_SASL_PASSWORD"):
        cfg.load(
            KafkaSettings, {"FRAMEBUS_SECURITY_PROTOCOL": "sasl_ssl", "FRAMEBUS_SASL_USERNAME": "u"}
        )


def test_configuration_doc_when_generated_then_matches_committed_file() -> None:
    from pathlib import Path

    from framebus_tools.configdoc import configuration_reference

    committed = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
    assert committed.read_text() == configuration_reference(), (
        "docs/configuration.md is stale: run `framebus config-docs > docs/configuration.md`"
    )
