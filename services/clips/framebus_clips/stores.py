"""Opening the store a setting names: the folder, or the S3 store when boto3 is installed.

Apart from `framebus_clips.store`, which the S3 store builds on, so that neither imports the other.
"""

from __future__ import annotations

from pathlib import Path

from framebus.errors import ConfigError
from framebus_clips.settings import ClipsSettings
from framebus_clips.store import ClipStore, DirectoryStore, parse_target


def open_store(settings: ClipsSettings) -> ClipStore:
    """The store `settings` name; ConfigError when S3 is asked for without boto3 installed."""
    target = parse_target(settings)
    if isinstance(target, Path):
        return DirectoryStore(target)
    try:
        from framebus_clips.s3store import S3Store
    except ImportError as exc:
        raise ConfigError(
            f"clips_target {settings.clips_target} needs boto3: pip install 'framebus[s3]' ({exc})"
        ) from None
    return S3Store(target, settings.s3)
