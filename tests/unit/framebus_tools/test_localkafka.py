"""The embedded broker's KRaft cluster id (formatting storage takes it on the command line)."""

from __future__ import annotations

import base64
import itertools

from framebus_tools.localkafka import cluster_id


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
