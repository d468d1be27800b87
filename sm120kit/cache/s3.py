"""A wheel store in an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, ...).

boto3 is imported only when a store is first used, so the package works without the ``s3``
extra. Credentials come from boto3's standard chain (env, ~/.aws, profile, instance role) and
never appear in the store's name, repr or errors.

Atomicity: each PUT (single or multipart) becomes visible whole, so the wheel is uploaded first
and meta.json after it. Locks use conditional writes: ``IfNoneMatch='*'`` to create and
``IfMatch=<etag>`` to take over a stale lock. Servers that ignore these headers (older MinIO /
Ceph releases) leave a window in which two controllers can both believe they hold a lock; the
cost is a duplicate build, and both puts still leave a consistent entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sm120kit.cache.store import BlobInfo, CacheError, Store, StoreUnavailable
from sm120kit.cache.store_types import SftpConnect, register_store_type

T = TypeVar("T")

#: How long a presigned download URL given to a host is valid (seconds).
PRESIGNED_S = 600

# Error codes a failed conditional write comes back with (412; 409 for a concurrent one).
_CONDITION_FAILED = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_MISSING = {"NoSuchKey", "404", "NotFound"}
# Codes that mean the credentials themselves are bad (not a missing or forbidden object: S3
# answers AccessDenied for a missing key when the caller may not list the bucket).
_CREDENTIALS_REFUSED = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"}


class S3Store(Store):
    """A store under ``s3://bucket/prefix``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        addressing_style: str | None = None,
        name: str | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url
        self.region = region
        self.profile = profile
        # S3-compatible servers behind an endpoint URL rarely do virtual-host buckets.
        self.addressing_style = addressing_style or ("path" if endpoint_url else "auto")
        where = f"s3://{bucket}/{self.prefix}".rstrip("/")
        self.name = name or (f"{where} @ {endpoint_url}" if endpoint_url else where)
        self._client = client

    @property
    def client(self) -> Any:
        """The boto3 S3 client, created on first use."""
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise CacheError(
                    f"cache {self.name}: boto3 is not installed (pip install 'sm120kit[s3]')"
                ) from None
            session = boto3.session.Session(profile_name=self.profile)
            self._client = session.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                config=Config(
                    s3={"addressing_style": self.addressing_style},
                    retries={"max_attempts": 5, "mode": "standard"},
                ),
            )
        return self._client

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a client call, turning setup problems into one-line CacheErrors."""
        from botocore.exceptions import (
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        try:
            return fn(*args, **kwargs)
        except (NoCredentialsError, PartialCredentialsError):
            raise StoreUnavailable(
                f"cache {self.name}: no S3 credentials (set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
            ) from None
        except EndpointConnectionError as exc:
            raise StoreUnavailable(f"cache {self.name}: cannot reach endpoint ({exc})") from None
        except self._client_error() as exc:
            if self._code(exc) in _CREDENTIALS_REFUSED:
                raise StoreUnavailable(
                    f"cache {self.name}: credentials refused ({self._code(exc)})"
                ) from None
            raise

    @staticmethod
    def _code(exc: Exception) -> str:
        response = getattr(exc, "response", None) or {}
        error = response.get("Error", {})
        code = str(error.get("Code", ""))
        status = str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        return code if code and not code.isdigit() else status or code

    def _client_error(self) -> type[Exception]:
        from botocore.exceptions import ClientError

        return ClientError

    def read_blob(self, path: str) -> bytes | None:
        return self._get(path)[0]

    def _get(self, path: str) -> tuple[bytes | None, str]:
        try:
            resp = self._call(self.client.get_object, Bucket=self.bucket, Key=self._key(path))
        except self._client_error() as exc:
            if self._code(exc) in _MISSING:
                return None, ""
            raise
        return resp["Body"].read(), str(resp.get("ETag", ""))

    def write_blob(self, path: str, data: bytes) -> None:
        self._call(self.client.put_object, Bucket=self.bucket, Key=self._key(path), Body=data)

    def upload_blob(self, path: str, src: Path) -> None:
        # Multipart uploads also become visible only when complete.
        self._call(self.client.upload_file, str(src), self.bucket, self._key(path))

    def download_blob(self, path: str, dest: Path) -> bool:
        try:
            self._call(self.client.download_file, self.bucket, self._key(path), str(dest))
        except self._client_error() as exc:
            if self._code(exc) in _MISSING:
                return False
            raise
        return True

    def download_url(self, path: str) -> str | None:
        # Presigned for 10 minutes: a host downloads the wheel from the bucket itself, so its
        # bytes never pass through the controller. The URL carries a signature (shown as ****
        # by redact_text wherever it is printed or logged).
        return str(
            self._call(
                self.client.generate_presigned_url,
                "get_object",
                Params={"Bucket": self.bucket, "Key": self._key(path)},
                ExpiresIn=PRESIGNED_S,
            )
        )

    def list_blobs(self, prefix: str = "") -> list[BlobInfo]:
        base = self._key(prefix.strip("/")) if prefix else self.prefix
        query = f"{base}/" if base else ""
        strip = len(f"{self.prefix}/") if self.prefix else 0
        found = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=query
        )
        listing: list[dict[str, Any]] = self._call(list, pages)
        for page in listing:
            for obj in page.get("Contents", []):
                found.append(
                    BlobInfo(obj["Key"][strip:], int(obj["Size"]), obj["LastModified"].timestamp())
                )
        return sorted(found)

    def delete_blob(self, path: str) -> None:
        self._call(self.client.delete_object, Bucket=self.bucket, Key=self._key(path))

    def create_blob_exclusive(self, path: str, data: bytes) -> bool:
        try:
            self._call(
                self.client.put_object,
                Bucket=self.bucket,
                Key=self._key(path),
                Body=data,
                IfNoneMatch="*",
            )
        except self._client_error() as exc:
            if self._code(exc) in _CONDITION_FAILED:
                return False
            raise
        return True

    def rename_blob(self, src: str, dst: str) -> bool:
        # S3 has no rename: copy then delete (used for quarantine, never for lock races).
        source = {"Bucket": self.bucket, "Key": self._key(src)}
        try:
            self._call(self.client.copy, source, self.bucket, self._key(dst))
        except self._client_error() as exc:
            if self._code(exc) in _MISSING:
                return False
            raise
        self.delete_blob(src)
        return True

    def replace_blob_if(self, path: str, expected: bytes, data: bytes) -> bool:
        current, etag = self._get(path)
        if current != expected or not etag:
            return False
        try:
            self._call(
                self.client.put_object,
                Bucket=self.bucket,
                Key=self._key(path),
                Body=data,
                IfMatch=etag,
            )
        except self._client_error() as exc:
            if self._code(exc) in _CONDITION_FAILED | _MISSING:
                return False
            raise
        return True


@register_store_type(
    "s3",
    allowed={"bucket", "prefix", "endpoint_url", "region", "profile", "addressing_style"},
    required=("bucket",),
)
def _from_spec(spec: Mapping[str, Any], sftp_connect: SftpConnect | None) -> Store:
    return S3Store(
        bucket=spec["bucket"],
        prefix=spec.get("prefix", ""),
        endpoint_url=spec.get("endpoint_url"),
        region=spec.get("region"),
        profile=spec.get("profile"),
        addressing_style=spec.get("addressing_style"),
        name=spec.get("name"),
    )
