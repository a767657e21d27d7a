"""Clips in an S3-compatible object store (AWS S3, versitygw, Ceph RGW, ...), through boto3.

boto3 signs the requests, retries (botocore's standard mode) and splits a large MP4 into a
multipart upload. An object that still cannot be stored raises ClipStoreError: the alert's
record is not published and its offset not committed, so a restarted service retries it.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import botocore.config
import botocore.exceptions
from boto3.exceptions import Boto3Error

from framebus_clips.settings import S3Settings
from framebus_clips.store import ClipStoreError, S3Target

if TYPE_CHECKING:
    from types_boto3_s3.client import S3Client

# What boto3 raises for an unreachable server, a refused request or a failed transfer.
S3_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, Boto3Error)


def s3_client(settings: S3Settings) -> S3Client:
    """A client of the settings' endpoint: explicit keys, or the AWS chain when unset."""
    secret = settings.s3_secret_access_key
    session = boto3.session.Session(
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=secret.reveal() if secret else None,
        region_name=settings.s3_region,
    )
    config = botocore.config.Config(
        connect_timeout=settings.s3_timeout_s,
        read_timeout=settings.s3_timeout_s,
        retries={"mode": "standard", "max_attempts": settings.s3_max_attempts},
        s3={"addressing_style": settings.s3_addressing.value},
    )
    return session.client("s3", endpoint_url=settings.s3_endpoint_url, config=config)


class S3Store:
    """Objects `s3://<bucket>/<prefix>/<key>`; MP4s are staged in a local temporary folder."""

    def __init__(self, target: S3Target, settings: S3Settings) -> None:
        self.target = target
        self._client = s3_client(settings)
        self._staging = Path(tempfile.mkdtemp(prefix="framebus-clips-"))

    def check(self) -> None:
        """ClipStoreError unless the bucket answers (wrong name, endpoint or credentials)."""
        try:
            self._client.head_bucket(Bucket=self.target.bucket)
        except S3_ERRORS as exc:
            raise ClipStoreError(
                f"cannot reach bucket {self.target.bucket}: {exc}; check clips_target, "
                "s3_endpoint_url and the credentials"
            ) from None

    def staging_path(self, key: str) -> Path:
        """A local file, uploaded and removed by `put_file`."""
        return self._staging / key

    def put_file(self, key: str, path: Path, content_type: str) -> str:
        """Upload (multipart when large), then remove the local file."""
        name = self.target.object_name(key)
        try:
            self._client.upload_file(
                str(path), self.target.bucket, name, ExtraArgs={"ContentType": content_type}
            )
        except S3_ERRORS as exc:
            raise ClipStoreError(f"cannot upload {self._uri(name)}: {exc}") from None
        finally:
            path.unlink(missing_ok=True)
        return self._uri(name)

    def put_bytes(self, key: str, data: bytes, content_type: str) -> str:
        """One PUT of `data`."""
        name = self.target.object_name(key)
        try:
            self._client.put_object(
                Bucket=self.target.bucket, Key=name, Body=data, ContentType=content_type
            )
        except S3_ERRORS as exc:
            raise ClipStoreError(f"cannot upload {self._uri(name)}: {exc}") from None
        return self._uri(name)

    def close(self) -> None:
        """Close the client's connections and remove the staging folder."""
        self._client.close()
        # Only what a failed write left (put_file removes each file it uploads): harmless.
        shutil.rmtree(self._staging, ignore_errors=True)

    def _uri(self, name: str) -> str:
        return f"s3://{self.target.bucket}/{name}"
