"""Where clips go: the target a setting names, the keys an alert gives, the folder store."""

from __future__ import annotations

from pathlib import Path

import pytest

from framebus import settings as cfg
from framebus.errors import ConfigError
from framebus.messages import Alert, ZoneAnchor
from framebus_clips.s3store import S3Store
from framebus_clips.settings import ClipsSettings, S3Settings
from framebus_clips.store import DirectoryStore, S3Target, object_key, parse_target
from framebus_clips.stores import open_store

T0 = 1_765_003_011_123_456


def alert(camera: str = "gate 1", track: str | None = "t/17") -> Alert:
    return Alert("door-dwell", camera, 9, T0, T0, 1, (), ZoneAnchor.CENTER, (), track_id=track)


def test_parse_target_when_unset_then_clips_dir() -> None:
    assert parse_target(ClipsSettings(clips_dir=Path("/data/clips"))) == Path("/data/clips")


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("s3://media/framebus/clips/", S3Target("media", "framebus/clips")),
        ("s3://media", S3Target("media", "")),
        ("file:///srv/clips", Path("/srv/clips")),
        ("/srv/clips", Path("/srv/clips")),
    ],
)
def test_parse_target_when_url_or_folder_then_bucket_and_prefix_or_path(
    target: str, expected: Path | S3Target
) -> None:
    assert parse_target(ClipsSettings(clips_target=target)) == expected


@pytest.mark.parametrize("target", ["gs://media/clips", "s3://", "s3:///clips"])
def test_clips_settings_when_target_not_a_folder_or_bucket_then_config_error_naming_it(
    target: str,
) -> None:
    with pytest.raises(ConfigError, match="FRAMEBUS_CLIPS_TARGET"):
        ClipsSettings(clips_target=target)


def test_s3_settings_when_key_id_without_secret_then_config_error() -> None:
    with pytest.raises(ConfigError, match="s3_access_key_id and s3_secret_access_key"):
        cfg.load(S3Settings, {"FRAMEBUS_S3_ACCESS_KEY_ID": "AKIA1"})


def test_s3_settings_when_secret_given_then_never_shown() -> None:
    env = {"FRAMEBUS_S3_ACCESS_KEY_ID": "AKIA1", "FRAMEBUS_S3_SECRET_ACCESS_KEY": "hunter2"}
    loaded = cfg.load(ClipsSettings, {**env, "FRAMEBUS_CLIPS_TARGET": "s3://media"})
    assert "hunter2" not in repr(loaded) and "hunter2" not in str(loaded)
    assert loaded.s3.s3_secret_access_key is not None
    assert loaded.s3.s3_secret_access_key.reveal() == "hunter2"


def test_object_key_when_same_alert_replayed_then_same_key_with_safe_camera() -> None:
    first, again = object_key(alert(), ".mp4"), object_key(alert(), ".mp4")
    assert first == again == "gate-1/20251206T063651.123456Z_door-dwell_t-17.mp4"
    assert object_key(alert(), ".jpg") == first.removesuffix(".mp4") + ".jpg"
    assert S3Target("media", "a/b").object_name(first) == f"a/b/{first}"
    assert S3Target("media", "").object_name(first) == first


def test_directory_store_when_bytes_put_twice_then_one_file_with_the_last(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "clips")
    store.check()
    key = object_key(alert(), ".jpg")
    store.put_bytes(key, b"first", "image/jpeg")
    uri = store.put_bytes(key, b"second", "image/jpeg")
    path = tmp_path / "clips" / key
    assert uri == path.as_uri() and path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_open_store_when_target_is_a_bucket_then_s3_store_staging_locally() -> None:
    settings = ClipsSettings(clips_target="s3://media/clips")
    store = open_store(settings)
    try:
        assert isinstance(store, S3Store) and store.target == S3Target("media", "clips")
        assert store.staging_path("cam/x.mp4").parts[-2:] == ("cam", "x.mp4")
        assert store.staging_path("cam/x.mp4").is_relative_to(Path(store._staging))
    finally:
        store.close()
    assert isinstance(open_store(ClipsSettings()), DirectoryStore)
