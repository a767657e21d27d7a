"""Where a clip's files go: a folder (the default) or an S3-compatible object store.

Both keep one object per alert and kind: the key follows from the alert alone
(`<camera>/<name>.mp4` and `.jpg`), so a replayed alert writes the same object again, never a
second one. The maker writes an MP4 to `staging_path(key)` and hands it to `put_file`; a JPEG it
hands over as bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from framebus.errors import FramebusError
from framebus.messages import Alert
from framebus_clips.remux import write_atomically
from framebus_clips.settings import FILE_SCHEME, S3_SCHEME, ClipsSettings
from framebus_clips.window import clip_name, safe_name

MP4_TYPE = "video/mp4"
JPEG_TYPE = "image/jpeg"


class ClipStoreError(FramebusError):
    """An object could not be stored (after the client's retries): the alert is not committed."""


class ClipStore(Protocol):
    """A place that keeps a clip's files under keys; `put_*` return the stored object's URI."""

    def staging_path(self, key: str) -> Path:
        """A local path to write a file to before `put_file` stores it as `key`."""
        ...

    def put_file(self, key: str, path: Path, content_type: str) -> str:
        """Store the file at `path` (from `staging_path(key)`) as `key`; return its URI."""
        ...

    def put_bytes(self, key: str, data: bytes, content_type: str) -> str:
        """Store `data` as `key`, replacing an earlier object; return its URI."""
        ...

    def check(self) -> None:
        """ClipStoreError unless objects can be stored: checked once, at start."""
        ...

    def close(self) -> None:
        """Release the client, and the local staging files."""
        ...


def object_key(alert: Alert, suffix: str) -> str:
    """`<camera>/<name><suffix>`: the same for a replayed alert, so its object is replaced."""
    return f"{safe_name(alert.camera_id)}/{clip_name(alert)}{suffix}"


@dataclass(frozen=True)
class S3Target:
    """s3://bucket/prefix: objects are `<prefix>/<key>` in `bucket`."""

    bucket: str
    prefix: str

    def object_name(self, key: str) -> str:
        """The object's full key in the bucket."""
        return f"{self.prefix}/{key}" if self.prefix else key


def parse_target(settings: ClipsSettings) -> Path | S3Target:
    """The folder or the bucket and prefix the settings name (`clips_target` over `clips_dir`)."""
    target = settings.clips_target
    if not target:
        return settings.clips_dir
    if target.startswith(S3_SCHEME):
        bucket, _, prefix = target.removeprefix(S3_SCHEME).partition("/")
        return S3Target(bucket, prefix.strip("/"))
    return Path(target.removeprefix(FILE_SCHEME)).expanduser()


class DirectoryStore:
    """Files `<root>/<key>`, each written under a temporary name and renamed."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def staging_path(self, key: str) -> Path:
        """The final path: the MP4 writer writes it atomically itself."""
        return self.root / key

    def put_file(self, key: str, path: Path, content_type: str) -> str:
        """Already in place (written at `staging_path`)."""
        return path.resolve().as_uri()

    def put_bytes(self, key: str, data: bytes, content_type: str) -> str:
        """Write through a temporary file and a rename."""
        path = self.root / key
        write_atomically(path, data)
        return path.resolve().as_uri()

    def check(self) -> None:
        """ClipStoreError unless the folder exists or can be made."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ClipStoreError(f"cannot make the clips folder {self.root}: {exc}") from None

    def close(self) -> None:
        """Nothing held."""
