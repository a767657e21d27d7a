"""`framebus live` as a process on the real broker: clips beside their alerts, the files, the login.

The tests write an alert to the alerts topic and its `Clip` record to the clips topic, as
`framebus alerts` and `framebus clips` would, with the clip's files in a temporary clips folder.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
import urllib.parse
from pathlib import Path

import confluent_kafka
import pytest

from framebus.codec import AlertCodec, ClipCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import Alert, Clip, ClipStatus, RuleType, ZoneAnchor
from tests.integration.conftest import TopicFactory
from tests.integration.liveserver import LiveLauncher, LiveProcess, live_topics, watch
from tests.reliability.harness import wait_for

pytestmark = [pytest.mark.integration]

MP4 = b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40  # the server does not parse it
JPEG = b"\xff\xd8\xff\xe0snapshot\xff\xd9"


def _alert(seq: int) -> Alert:
    return Alert(
        "door-dwell", "cam-a", seq, 1_765_000_000_000_000 + seq, 1, 1, (), ZoneAnchor.CENTER, (),
        rule_type=RuleType.DWELL, track_id="cam-a/1/1", measure=2.0,
    )  # fmt: skip


def _clip(alert: Alert, status: ClipStatus, uri: str | None, snapshot: str | None) -> Clip:
    return Clip(
        alert.rule, alert.camera_id, alert.seq, alert.capture_ts_us, alert.track_id, 0, alert.seq,
        status, reason=None if uri else "no video packets of the camera around the alert",
        uri=uri, snapshot_uri=snapshot,
    )  # fmt: skip


def _publish(kafka: KafkaSettings, live: LiveProcess, alerts: str, clips: str, *pairs: tuple[Alert, Clip]) -> None:  # fmt: skip
    """Each alert, then its clip record; returns once the live process read the clip records."""
    before = live.metric("framebus_live_clips_received_total")
    producer = confluent_kafka.Producer(kafka.client_config())
    for alert, clip in pairs:
        producer.produce(alerts, AlertCodec().encode(alert), key=alert.camera_id)
        producer.flush(10)
        producer.produce(clips, ClipCodec().encode(clip), key=clip.camera_id)
    assert producer.flush(10) == 0
    wait_for(
        lambda: live.metric("framebus_live_clips_received_total") >= before + len(pairs),
        20,
        "clip records read by live",
    )


def _clip_files(tmp_path: Path) -> tuple[Path, str, str]:
    """The clips folder, one clip's and one snapshot's file:// URIs in it; a secret beside it."""
    clips_dir = tmp_path / "clips"
    (clips_dir / "cam-a").mkdir(parents=True)
    video, snapshot = clips_dir / "cam-a" / "a_door-dwell.mp4", clips_dir / "cam-a" / "a.jpg"
    video.write_bytes(MP4)
    snapshot.write_bytes(JPEG)
    (tmp_path / "secret.jpg").write_bytes(b"not to be served")
    return clips_dir, video.resolve().as_uri(), snapshot.resolve().as_uri()


def _get(
    live: LiveProcess, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """A raw GET (no redirect followed, the path sent as it is)."""
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def _login(live: LiveProcess, password: str) -> tuple[int, str]:
    """POST /login; (status, the Set-Cookie header or "")."""
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=10)
    try:
        body = urllib.parse.urlencode({"password": password})
        conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Set-Cookie") or ""
    finally:
        conn.close()


def test_live_when_clip_records_arrive_then_feed_links_them_and_files_are_served(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, launch_live: LiveLauncher
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    clips_dir, video_uri, snapshot_uri = _clip_files(tmp_path)
    live = launch_live(names, t, tmp_path / "live.log", clips_dir=clips_dir)
    first = _alert(1)
    _publish(kafka, live, t.alerts, names.clips_topic, (first, _clip(first, ClipStatus.WRITTEN, video_uri, snapshot_uri)))  # fmt: skip
    # A page open while the next clip record arrives gets it as a `clip` message.
    second = _alert(2)
    s3 = _clip(second, ClipStatus.WRITTEN, "s3://bucket/cam-a/b.mp4", None)
    later = threading.Timer(1.0, _publish, (kafka, live, t.alerts, names.clips_topic, (second, s3)))
    later.start()
    try:
        got = asyncio.run(watch(live.url, 5.0, []))
    finally:
        later.join()
    fed = got.of_type("hello")[0]["alerts"][0]
    assert fed["seq"] == 1
    assert fed["clip"]["status"] == "WRITTEN"
    assert fed["clip"]["video"] == {"href": "/clips/cam-a/a_door-dwell.mp4"}
    assert fed["clip"]["snapshot"] == {"href": "/clips/cam-a/a.jpg"}
    clip_msg = got.of_type("clip")[0]
    assert clip_msg["alert"]["seq"] == 2
    assert clip_msg["clip"]["video"] == {"text": "s3://bucket/cam-a/b.mp4"}  # not served here

    status, headers, body = _get(live, fed["clip"]["video"]["href"])
    assert (status, headers["Content-Type"], body) == (200, "video/mp4", MP4)
    status, headers, body = _get(live, fed["clip"]["video"]["href"], {"Range": "bytes=100-199"})
    assert (status, body) == (206, MP4[100:200])  # the browser seeks in the video
    status, headers, body = _get(live, fed["clip"]["snapshot"]["href"])
    assert (status, headers["Content-Type"], body) == (200, "image/jpeg", JPEG)
    for path in ("/clips/../secret.jpg", "/clips/%2e%2e/secret.jpg", "/clips/cam-a/..%2f..%2fsecret.jpg"):  # fmt: skip
        status, _, body = _get(live, path)
        assert status == 404 and b"not to be served" not in body, path


def test_live_when_password_set_then_nothing_without_login_and_all_with_it(
    kafka: KafkaSettings, topics: TopicFactory, tmp_path: Path, launch_live: LiveLauncher
) -> None:
    names = topics()
    t = live_topics(kafka, names)
    clips_dir, video_uri, snapshot_uri = _clip_files(tmp_path)
    password_file = tmp_path / "password"
    password_file.write_text("correct horse battery\n")
    live = launch_live(
        names,
        t,
        tmp_path / "live.log",
        clips_dir=clips_dir,
        auth="password",
        password_file=password_file,
    )
    alert = _alert(1)
    _publish(kafka, live, t.alerts, names.clips_topic, (alert, _clip(alert, ClipStatus.WRITTEN, video_uri, snapshot_uri)))  # fmt: skip
    clip_path = "/clips/cam-a/a_door-dwell.mp4"

    status, headers, _ = _get(live, "/")
    assert (status, headers["Location"]) == (303, "/login")
    for path in ("/live.js", "/ws", "/mjpeg/cam-a", clip_path, "/clips/cam-a/a.jpg"):
        assert _get(live, path)[0] == 401, path
    assert _get(live, "/readyz")[0] == 200  # probes and scrapes need no login
    assert _login(live, "wrong") == (401, "")
    status, set_cookie = _login(live, "correct horse battery")
    assert status == 303 and "HttpOnly" in set_cookie, set_cookie
    cookie = {"Cookie": set_cookie.split(";")[0]}
    status, _, page = _get(live, "/", cookie)
    assert status == 200 and b"framebus live" in page
    assert _get(live, clip_path, cookie)[::2] == (200, MP4)
    got = asyncio.run(watch(live.url, 1.0, [], headers=cookie))
    assert got.of_type("hello")[0]["alerts"][0]["clip"]["video"] == {"href": clip_path}
    assert "correct horse" not in live.service.text()  # never logged
