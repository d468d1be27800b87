"""S3Store against a real S3-compatible HTTP server: moto in server mode on 127.0.0.1.

The whole store contract of test_cache_store.py runs here too, over real HTTP with boto3.
Credentials are dummies set in the environment (moto accepts any).
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from sm120kit.cache import manage
from sm120kit.cache.registry import make_store
from sm120kit.cache.s3 import S3Store
from sm120kit.cache.store import CacheError, LocalStore
from tests.conftest import S3_BUCKET as BUCKET
from tests.fleet.test_cache_store import StoreContract, make_wheel, new_entry


def s3_store(endpoint: str, prefix: str | None = None) -> S3Store:
    return S3Store(BUCKET, prefix or f"tests/{secrets.token_hex(6)}", endpoint_url=endpoint)


class TestS3Store(StoreContract):
    @pytest.fixture
    def store(self, s3_endpoint: str) -> S3Store:
        return s3_store(s3_endpoint)


def test_server_enforces_conditional_writes(s3_endpoint: str) -> None:
    """The lock design needs IfNoneMatch='*' and IfMatch=<etag>; moto's server honours both."""
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    key = f"cond/{secrets.token_hex(6)}"
    first = client.put_object(Bucket=BUCKET, Key=key, Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as err:
        client.put_object(Bucket=BUCKET, Key=key, Body=b"2", IfNoneMatch="*")
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"
    with pytest.raises(ClientError):
        client.put_object(Bucket=BUCKET, Key=key, Body=b"3", IfMatch='"0000"')
    client.put_object(Bucket=BUCKET, Key=key, Body=b"4", IfMatch=first["ETag"])
    assert client.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"4"


def test_replace_blob_if_needs_the_expected_content(s3_endpoint: str) -> None:
    store = s3_store(s3_endpoint)
    assert store.create_blob_exclusive("locks/x.lock", b"old")
    assert not store.create_blob_exclusive("locks/x.lock", b"other")
    assert not store.replace_blob_if("locks/x.lock", b"not-old", b"new")
    assert store.replace_blob_if("locks/x.lock", b"old", b"new")
    assert not store.replace_blob_if("locks/x.lock", b"old", b"newer")
    assert store.read_blob("locks/x.lock") == b"new"
    assert not store.replace_blob_if("locks/absent.lock", b"old", b"new")


def test_layout_under_prefix_and_isolation(s3_endpoint: str, tmp_path: Path) -> None:
    one, two = s3_store(s3_endpoint), s3_store(s3_endpoint)
    key, meta = new_entry()
    one.put(key, make_wheel(tmp_path), meta)
    assert two.keys() == [] and one.keys() == [key]
    listed = boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(
        Bucket=BUCKET, Prefix=one.prefix + "/"
    )
    names = sorted(o["Key"] for o in listed["Contents"])
    assert names == [
        f"{one.prefix}/{key[:2]}/{key}/demo-1.0-py3-none-any.whl",
        f"{one.prefix}/{key[:2]}/{key}/meta.json",
    ]


def test_multipart_sized_wheel_roundtrip(s3_endpoint: str, tmp_path: Path) -> None:
    """Above boto3's 8 MiB threshold the upload is multipart; still one atomic object."""
    store = s3_store(s3_endpoint)
    key, meta = new_entry()
    wheel = make_wheel(tmp_path / "src", body=os.urandom(9 << 20))
    store.put(key, wheel, meta)
    assert store.fetch(key, tmp_path / "out").read_bytes() == wheel.read_bytes()
    store.verify_entry(key)


def test_make_store_and_no_secrets_shown(s3_endpoint: str, tmp_path: Path) -> None:
    spec = {"type": "s3", "bucket": BUCKET, "prefix": "spec/x", "endpoint_url": s3_endpoint}
    store = make_store(spec)
    assert isinstance(store, S3Store)
    key, meta = new_entry()
    store.put(key, make_wheel(tmp_path), meta)
    assert store.keys() == [key]
    shown = f"{store.name} {store!r}"
    assert "testing-secret" not in shown and "testing" not in shown.replace("tests", "")


def test_missing_credentials_are_one_line(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    # No instance-metadata lookups from a test machine.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = s3_store(s3_endpoint)
    with pytest.raises(CacheError, match="no S3 credentials") as err:
        store.get_meta("a" * 64)
    assert "\n" not in str(err.value)


def test_export_from_s3_import_to_local(s3_endpoint: str, tmp_path: Path) -> None:
    s3 = s3_store(s3_endpoint)
    local = LocalStore(tmp_path / "local")
    first, meta1 = new_entry("alpha")
    second, meta2 = new_entry("beta")
    s3.put(first, make_wheel(tmp_path / "w", "alpha-1.0-py3-none-any.whl"), meta1)
    local.put(second, make_wheel(tmp_path / "w", "beta-1.0-py3-none-any.whl"), meta2)
    rows = manage.list_entries([local, s3], now=time.time())
    assert [(r["package"], r["store"]) for r in rows] == [("alpha", s3.name), ("beta", local.name)]

    out = tmp_path / "export"
    result = manage.export_dir([local, s3], out)
    assert sorted(r["key"] for r in result["exported"]) == sorted([first, second])
    target = s3_store(s3_endpoint)
    assert sorted(manage.import_dir(out, target)["imported"]) == sorted([first, second])
    assert [r["status"] for r in manage.verify([target])] == ["ok", "ok"]
    manage.copy_entry(target, local, first, tmp_path / "copy")
    assert sorted(local.keys()) == sorted([first, second])
