"""The embedded broker's KRaft cluster id (formatting storage takes it on the command line)."""

from __future__ import annotations

import base64
import itertools
import socket
from pathlib import Path

import pytest

from framebus.errors import LocalKafkaError
from framebus_tools.localkafka import LocalKafka, cluster_id, port_taken


def test_cluster_id_is_16_bytes_of_url_safe_base64() -> None:
    text = cluster_id()
    assert len(text) == 22
    assert len(base64.urlsafe_b64decode(text + "==")) == 16


def test_cluster_id_never_starts_with_a_dash() -> None:
    # The first draw encodes to "-" first (0xf8 -> 62 -> "-"); the id is drawn again.
    draws = itertools.chain([b"\xf8" + bytes(15)], itertools.repeat(bytes(16)))
    text = cluster_id(lambda: next(draws))
    assert text == "A" * 22
    assert base64.urlsafe_b64encode(b"\xf8" + bytes(15)).decode().startswith("-")


def test_start_when_port_taken_by_another_process_then_refuses_with_the_port(
    tmp_path: Path,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert port_taken(port)
        broker = LocalKafka(port=port, home=tmp_path)
        with pytest.raises(LocalKafkaError, match=f"port {port} is already taken"):
            broker.start()


def test_port_taken_when_nothing_listens_then_false() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert not port_taken(port)
