"""The login and the clip links in a real browser (Debian's chromium, driven by Playwright)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from framebus.kafka.settings import KafkaSettings
from framebus.messages import ClipStatus
from tests.integration.conftest import TopicFactory
from tests.integration.liveserver import LiveLauncher, live_topics
from tests.integration.test_live_clips import MP4, _alert, _clip, _clip_files, _publish
from tests.reliability.harness import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def _clip_links(page: Any) -> list[dict[str, str]]:
    links: list[dict[str, str]] = page.evaluate(
        "() => [...document.querySelectorAll('#alerts li .clip a, #alerts li .clip span')]"
        ".map(e => ({cls: e.className, href: e.getAttribute('href') || '', text: e.textContent}))"
    )
    return links


def test_live_page_when_logged_in_then_alerts_link_their_clip_and_snapshot(
    kafka: KafkaSettings,
    topics: TopicFactory,
    tmp_path: Path,
    launch_live: LiveLauncher,
    browser: Any,
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    clips_dir, video_uri, snapshot_uri = _clip_files(tmp_path)
    (tmp_path / "password").write_text("page password")
    live = launch_live(
        names,
        t,
        tmp_path / "live.log",
        clips_dir=clips_dir,
        auth="password",
        password_file=tmp_path / "password",
    )
    page = browser.new_page()
    page.goto(live.url + "/")
    assert page.url == live.url + "/login"  # sent to the form
    page.fill("input[name=password]", "page password")
    page.click("button[type=submit]")
    page.wait_for_url(live.url + "/")
    page.wait_for_function("() => document.getElementById('connection').dataset.state === 'open'")
    alert, gone = _alert(1), _alert(2)
    _publish(
        kafka,
        live,
        t.alerts,
        names.clips_topic,
        (alert, _clip(alert, ClipStatus.WRITTEN, video_uri, snapshot_uri)),
        (gone, _clip(gone, ClipStatus.NO_VIDEO, None, None)),
    )
    wait_for(lambda: len(_clip_links(page)) == 3, 10, "the links and the status in the feed")
    links = {link["cls"]: link for link in _clip_links(page)}
    assert links["snapshot"]["href"] == "/clips/cam-a/a.jpg"
    assert links["clip"]["href"] == "/clips/cam-a/a_door-dwell.mp4"
    assert links["clip-status"]["text"].startswith("NO_VIDEO: no video packets")
    # The browser's session cookie fetches the clip.
    got = page.request.get(live.url + links["clip"]["href"])
    assert (got.status, got.headers["content-type"], got.body()) == (200, "video/mp4", MP4)
