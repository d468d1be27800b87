"""A wheel store on a cache host, reached over SFTP with a paramiko SFTPClient.

The store takes a callable returning the client, so a caller can hand in a fabric
connection's ``.sftp()``; the same class therefore also serves a build host's own cache under
its work_root.

Atomicity rests on two SFTP renames: ``posix-rename@openssh.com`` (replaces the target
atomically) for writes, and plain SFTP v3 RENAME, which the protocol defines to fail when the
target exists, for exclusive creates (OpenSSH's sftp-server implements it with link(2)).
A server without the posix-rename extension gets remove-then-rename, which is not atomic.

A host's own store is `leased`: each operation borrows one of its connection's SFTP sessions
for its duration, because a paramiko SFTPClient must not serve two threads at once and the
stack step looks up several files of one host at a time.
"""

from __future__ import annotations

import base64
import errno
import functools
import hashlib
import posixpath
import secrets
import stat
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from sm120kit.cache.store import BlobInfo, CacheError, Store, StoreUnavailable
from sm120kit.cache.store_types import SftpConnect, register_store_type
from sm120kit.runner import known_hosts


def _missing(exc: OSError) -> bool:
    return isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOENT


_F = TypeVar("_F", bound=Callable[..., Any])


def _leasing(method: _F) -> _F:
    """A store operation that borrows a session for its whole duration when the store is
    leased (nested operations use the one borrowed)."""

    @functools.wraps(method)
    def inner(self: SFTPStore, *args: Any, **kwargs: Any) -> Any:
        if self._lease is None or getattr(self._held, "client", None) is not None:
            return method(self, *args, **kwargs)
        with self._lease() as client:
            self._held.client = client
            try:
                return method(self, *args, **kwargs)
            finally:
                self._held.client = None

    return inner  # type: ignore[return-value]


class SFTPStore(Store):
    """A store rooted at ``root`` on an SFTP server.

    ``root`` may be absolute or relative to the login directory; a leading ``~/`` is read as
    relative (SFTP does not expand ``~``).
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        root: str,
        name: str | None = None,
        owns_client: bool = False,
    ) -> None:
        self._connect = connect
        self._sftp: Any = None
        self._owns = owns_client
        self._lease: Callable[[], AbstractContextManager[Any]] | None = None
        self._held = threading.local()
        if root in ("~", "~/"):
            root = "."
        elif root.startswith("~/"):
            root = root[2:]
        self.root = root.rstrip("/") or "/"
        self.name = name or f"sftp:{root}"

    @classmethod
    def leased(
        cls, lease: Callable[[], AbstractContextManager[Any]], root: str, name: str | None = None
    ) -> SFTPStore:
        """A store whose operations each borrow a session from `lease` (a connection's
        ``sftp_session``), for a store used by several threads of one connection."""

        def unleased() -> Any:
            raise CacheError(f"cache {name or root}: SFTP used outside a store operation")

        store = cls(unleased, root, name=name)
        store._lease = lease
        return store

    @property
    def sftp(self) -> Any:
        """The SFTPClient: the one borrowed for this operation, or this store's own, opened on
        first use."""
        held = getattr(self._held, "client", None)
        if held is not None:
            return held
        if self._sftp is None:
            self._sftp = self._connect()
        return self._sftp

    def close(self) -> None:
        if self._sftp is not None and self._owns:
            transport = self._sftp.get_channel().get_transport()
            self._sftp.close()
            if transport is not None:
                transport.close()
        self._sftp = None

    def _p(self, path: str) -> str:
        if path.startswith("/") or ".." in path.split("/"):
            raise CacheError(f"cache {self.name}: bad store path {path!r}")
        return posixpath.join(self.root, path) if path else self.root

    def _makedirs(self, directory: str) -> None:
        todo = []
        here = directory
        while here not in ("", "/", "."):
            try:
                if stat.S_ISDIR(self.sftp.stat(here).st_mode or 0):
                    break
            except OSError as exc:
                if not _missing(exc):
                    raise
            todo.append(here)
            here = posixpath.dirname(here)
        for path in reversed(todo):
            try:
                self.sftp.mkdir(path)
            except OSError:
                # Lost a race with another creator; fine as long as it is a directory now.
                if not stat.S_ISDIR(self.sftp.stat(path).st_mode or 0):
                    raise

    def _temp_beside(self, target: str) -> str:
        self._makedirs(posixpath.dirname(target))
        base = posixpath.basename(target)
        return posixpath.join(posixpath.dirname(target), f".tmp-{base}-{secrets.token_hex(6)}")

    def _write_temp(self, target: str, data: bytes) -> str:
        tmp = self._temp_beside(target)
        with self.sftp.open(tmp, "wb") as fh:
            fh.write(data)
        return tmp

    def _replace(self, tmp: str, target: str) -> None:
        try:
            self.sftp.posix_rename(tmp, target)
        except OSError as exc:
            if _missing(exc):
                raise
            # No posix-rename extension on this server: not atomic, see module docstring.
            try:
                self.sftp.remove(target)
            except OSError:
                pass
            self.sftp.rename(tmp, target)

    @_leasing
    def read_blob(self, path: str) -> bytes | None:
        try:
            with self.sftp.open(self._p(path), "rb") as fh:
                return bytes(fh.read())
        except OSError as exc:
            if _missing(exc):
                return None
            raise

    @_leasing
    def write_blob(self, path: str, data: bytes) -> None:
        target = self._p(path)
        self._replace(self._write_temp(target, data), target)

    @_leasing
    def upload_blob(self, path: str, src: Path) -> None:
        target = self._p(path)
        tmp = self._temp_beside(target)
        try:
            self.sftp.put(str(src), tmp, confirm=True)
            self._replace(tmp, target)
        except BaseException:
            self._remove_quietly(tmp)
            raise

    @_leasing
    def download_blob(self, path: str, dest: Path) -> bool:
        try:
            self.sftp.get(self._p(path), str(dest))
        except OSError as exc:
            if _missing(exc):
                Path(dest).unlink(missing_ok=True)
                return False
            raise
        return True

    @_leasing
    def list_blobs(self, prefix: str = "") -> list[BlobInfo]:
        found: list[BlobInfo] = []
        top = self._p(prefix)
        stack = [(top, prefix.strip("/"))]
        while stack:
            remote, rel = stack.pop()
            try:
                entries = self.sftp.listdir_attr(remote)
            except OSError as exc:
                if _missing(exc):
                    continue
                raise
            for attr in entries:
                child_rel = f"{rel}/{attr.filename}" if rel else attr.filename
                child = posixpath.join(remote, attr.filename)
                if stat.S_ISDIR(attr.st_mode or 0):
                    stack.append((child, child_rel))
                elif stat.S_ISREG(attr.st_mode or 0):
                    found.append(
                        BlobInfo(child_rel, int(attr.st_size or 0), float(attr.st_mtime or 0))
                    )
        return sorted(found)

    def _remove_quietly(self, remote: str) -> None:
        try:
            self.sftp.remove(remote)
        except OSError:
            pass

    @_leasing
    def delete_blob(self, path: str) -> None:
        try:
            self.sftp.remove(self._p(path))
        except OSError as exc:
            if not _missing(exc):
                raise

    @_leasing
    def create_blob_exclusive(self, path: str, data: bytes) -> bool:
        target = self._p(path)
        tmp = self._write_temp(target, data)
        try:
            self.sftp.rename(tmp, target)  # SFTP v3 RENAME: fails when target exists
            return True
        except OSError:
            try:
                self.sftp.stat(target)
            except OSError:
                raise CacheError(f"cache {self.name}: cannot create {path}") from None
            return False
        finally:
            self._remove_quietly(tmp)

    @_leasing
    def rename_blob(self, src: str, dst: str) -> bool:
        target = self._p(dst)
        self._makedirs(posixpath.dirname(target))
        try:
            self.sftp.rename(self._p(src), target)
        except OSError as exc:
            try:
                self.sftp.stat(self._p(src))
            except OSError:
                return False
            raise CacheError(f"cache {self.name}: cannot move {src} to {dst}: {exc}") from None
        return True

    @_leasing
    def remove_empty_dirs(self, prefix: str) -> None:
        here = prefix.strip("/")
        while here:
            try:
                self.sftp.rmdir(self._p(here))
            except OSError:
                return
            here = posixpath.dirname(here)


def known_hosts_files(spec: Mapping[str, Any]) -> list[Path]:
    """The known_hosts files a store's host key is judged against: the spec's
    ``known_hosts`` (when given), then the user's ``~/.ssh/known_hosts``."""
    files = [Path("~/.ssh/known_hosts").expanduser()]
    if spec.get("known_hosts"):
        files.insert(0, Path(str(spec["known_hosts"])).expanduser())
    return files


def host_key_refusal(files: list[Path], host: str, port: int, blob: bytes) -> str | None:
    """None when `files` accept the key `blob` of `host`:`port`, read as OpenSSH reads
    known_hosts (sm120kit/runner/known_hosts.py: markers, several keys per host, hashed
    names); else the one-line refusal. A key revoked in any file is refused, one a file lists
    is accepted, a host listed only with other keys is CHANGED, else unknown."""
    digest = base64.b64encode(hashlib.sha256(blob).digest()).rstrip(b"=").decode()
    fingerprint = f"SHA256:{digest}"
    name = known_hosts.host_name(host, port)
    results = [(path, known_hosts.check_host(path, host, port, blob)) for path in files]
    for wanted in (known_hosts.Verdict.REVOKED, known_hosts.Verdict.ACCEPT,
                   known_hosts.Verdict.CHANGED):  # fmt: skip
        for path, result in results:
            if result.verdict is wanted:
                return known_hosts.refusal(result, name, fingerprint, path)
    where = ", ".join(str(p) for p in files)
    return (f"host key of {name} ({fingerprint}) is not in {where}; verify it and add it "
            "(ssh-keyscan) to the store's known_hosts")  # fmt: skip


def paramiko_connect(spec: Mapping[str, Any]) -> Any:
    """Open an SFTPClient from a store spec with plain paramiko.

    Host keys must already be known (``known_hosts`` from the spec, then the user's
    known_hosts, read as OpenSSH reads them: `host_key_refusal`); an unknown, changed or
    revoked key is refused, never silently trusted.
    """

    files = known_hosts_files(spec)
    host, port = str(spec["host"]), int(spec.get("port") or 22)
    refused: list[str] = []

    class Judge(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
        # paramiko's own stores stay empty (its reader fails on @cert-authority lines), so
        # every presented key comes here.
        def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
            refusal = host_key_refusal(files, host, port, key.asbytes())
            if refusal is not None:
                refused.append(refusal)
                raise paramiko.SSHException(refusal)

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(Judge())
    try:
        client.connect(
            hostname=host,
            port=port,
            username=spec.get("user"),
            key_filename=spec.get("key_filename"),
            timeout=30,
        )
    except (paramiko.SSHException, OSError) as exc:
        client.close()
        if refused:  # not a store that is down: one that must not be trusted
            raise CacheError(f"cache sftp:{spec['host']}: {refused[0]}") from None
        raise StoreUnavailable(f"cache sftp:{spec['host']}: cannot connect ({exc})") from None
    try:
        return client.open_sftp()
    except paramiko.SSHException as exc:
        client.close()
        raise CacheError(
            f"cache sftp:{spec['host']}: server refused the sftp subsystem ({exc})"
        ) from None


@register_store_type(
    "sftp",
    allowed={"host", "path", "port", "user", "key_filename", "known_hosts"},
    required=("host", "path"),
)
def _from_spec(spec: Mapping[str, Any], sftp_connect: SftpConnect | None) -> Store:
    if sftp_connect is not None:
        connect = sftp_connect
        return SFTPStore(lambda: connect(spec), spec["path"], name=spec.get("name"))
    return SFTPStore(
        lambda: paramiko_connect(spec), spec["path"], name=spec.get("name"), owns_client=True
    )
