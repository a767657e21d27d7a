from __future__ import annotations

from framebus_live.telemetry import LiveMetrics
from framebus_live.viewer import MAX_TEXTS, PageViewer


class SocketStub:
    async def send_str(self, data: str) -> None:
        raise AssertionError("nothing is sent in this test")

    async def send_bytes(self, data: bytes) -> None:
        raise AssertionError("nothing is sent in this test")


def test_viewer_when_more_texts_than_queue_holds_then_oldest_dropped_and_counted() -> None:
    metrics = LiveMetrics()
    viewer = PageViewer(SocketStub(), metrics)
    for i in range(MAX_TEXTS + 3):
        viewer.offer_text(f"alert {i}")
    assert metrics.registry.get_sample_value("framebus_live_texts_dropped_total") == 3


def test_viewer_when_cameras_shown_then_only_new_ones_returned() -> None:
    viewer = PageViewer(SocketStub(), LiveMetrics())
    assert viewer.show(["a", "b", "a"]) == ["a", "b"]
    assert viewer.show(["b", "c"]) == ["c"]  # a page's unchanged cameras need no new picture
    assert viewer.cameras == {"b", "c"}
