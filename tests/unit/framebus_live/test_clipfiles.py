from __future__ import annotations

import os
from pathlib import Path

import pytest

from framebus_live.clipfiles import link, served_file


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "clips" / "cam-a").mkdir(parents=True)
    (tmp_path / "clips" / "cam-a" / "x.mp4").write_bytes(b"mp4")
    (tmp_path / "clips" / "cam-a" / "x.jpg").write_bytes(b"jpg")
    (tmp_path / "clips" / "cam-a" / "notes.txt").write_text("no")
    (tmp_path / "secret.jpg").write_bytes(b"secret")
    return tmp_path / "clips"


def test_served_file_when_clip_or_snapshot_inside_then_served(root: Path) -> None:
    assert served_file(root, "cam-a/x.mp4") == (root / "cam-a" / "x.mp4").resolve()
    assert served_file(root, "cam-a/x.jpg") == (root / "cam-a" / "x.jpg").resolve()


@pytest.mark.parametrize(
    "relative",
    [
        "../secret.jpg",
        "cam-a/../../secret.jpg",
        "/etc/passwd",
        "cam-a/notes.txt",
        "cam-a",
        "cam-a/missing.mp4",
        "",
        "cam-a/x.mp4\x00.jpg",
    ],
)
def test_served_file_when_outside_or_not_a_clip_then_refused(root: Path, relative: str) -> None:
    assert served_file(root, relative) is None


def test_served_file_when_symlink_points_out_then_refused(root: Path) -> None:
    os.symlink(root.parent / "secret.jpg", root / "cam-a" / "link.jpg")
    assert served_file(root, "cam-a/link.jpg") is None


def test_link_when_file_uri_inside_then_clips_route(root: Path) -> None:
    uri = (root / "cam-a" / "20261206T1945Z_door dwell.mp4").resolve().as_uri()
    assert link(uri, root) == {"href": "/clips/cam-a/20261206T1945Z_door%20dwell.mp4"}


def test_link_when_file_elsewhere_or_object_store_then_text(root: Path) -> None:
    outside = (root.parent / "secret.jpg").resolve().as_uri()
    assert link(outside, root) == {"text": outside}
    sneaky = (root / "cam-a").resolve().as_uri() + "/../../secret.jpg"
    assert link(sneaky, root) == {"text": sneaky}
    assert link("s3://bucket/cam-a/x.mp4", root) == {"text": "s3://bucket/cam-a/x.mp4"}


def test_link_when_presigned_https_then_linked_as_is(root: Path) -> None:
    url = "https://bucket.s3.amazonaws.com/cam-a/x.mp4?X-Amz-Signature=abc"
    assert link(url, root) == {"href": url}
    assert link(None, root) is None
