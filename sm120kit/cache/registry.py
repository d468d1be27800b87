"""Store types by name: each backend registers the type it implements; ``make_store`` builds one.

The model is pyinfra's connector registry: a backend module (``sftp.py``, ``s3.py``) imports
the base (``store.py``: the Store interface and the local directory store) and this registry,
and registers a factory here; neither the base nor this registry imports a backend. The
backends that ship with sm120kit are named in :data:`BUILTIN_BACKENDS` and loaded by name the
first time their type is asked for (the way pyinfra loads its connectors' entry points), so a
store's third-party library loads only when such a store is configured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from sm120kit.cache.store import CacheError, LocalStore, Store

#: ``sftp_connect(spec)`` returns a paramiko SFTPClient (e.g. a fabric connection's ``.sftp()``).
SftpConnect = Callable[[Mapping[str, Any]], Any]
#: A backend's factory: a checked spec (and an optional SFTP connector) in, a Store out.
StoreFactory = Callable[[Mapping[str, Any], "SftpConnect | None"], Store]

#: Store type -> module that registers it, imported on first use of the type (``local`` is
#: part of the base and registered below).
BUILTIN_BACKENDS: dict[str, str] = {
    "sftp": "sm120kit.cache.sftp",
    "s3": "sm120kit.cache.s3",
}


@dataclass(frozen=True)
class StoreType:
    """One registered store type: the spec keys it takes and how to build it."""

    kind: str
    allowed: frozenset[str]
    required: tuple[str, ...]
    factory: StoreFactory


_TYPES: dict[str, StoreType] = {}


def register_store_type(
    kind: str, *, allowed: set[str], required: tuple[str, ...] = ()
) -> Callable[[StoreFactory], StoreFactory]:
    """Decorator for a backend's factory: ``@register_store_type("s3", allowed={...})``.

    ``type`` and ``name`` are always allowed; ``required`` keys must be set and non-empty.
    """

    def register(factory: StoreFactory) -> StoreFactory:
        _TYPES[kind] = StoreType(kind, frozenset(allowed | {"type", "name"}), required, factory)
        return factory

    return register


def store_type(kind: str) -> StoreType | None:
    """The registered type ``kind`` (loading a built-in backend on first use), or None."""
    if kind not in _TYPES and kind in BUILTIN_BACKENDS:
        import_module(BUILTIN_BACKENDS[kind])
    return _TYPES.get(kind)


def known_types() -> list[str]:
    """Every store type a spec may name: the built-in ones first, then any registered since."""
    return list(dict.fromkeys(["local", *BUILTIN_BACKENDS, *_TYPES]))


def make_store(spec: Mapping[str, Any], sftp_connect: SftpConnect | None = None) -> Store:
    """A store from config: ``{"type": "local"|"sftp"|"s3", ...}``.

    local: ``path`` (default :func:`~sm120kit.cache.store.default_local_root`), ``name``.
    sftp: ``host``, ``path``; ``port``, ``user``, ``key_filename``, ``known_hosts``, ``name``.
    ``sftp_connect(spec)`` must return a paramiko SFTPClient (e.g. a fabric connection's
    ``.sftp()``); without it a plain paramiko connection is opened (system known_hosts only).
    s3: ``bucket``; ``prefix``, ``endpoint_url``, ``region``, ``profile``, ``addressing_style``,
    ``name``. Credentials come from the standard AWS env/config chain, never from the spec.
    Raises CacheError for an unknown type, an unknown key or a missing one.
    """
    kind = spec.get("type")
    found = store_type(kind) if isinstance(kind, str) else None
    if found is None:
        raise CacheError(
            f"cache store spec: type {kind!r} is not one of {', '.join(known_types())}"
        )
    for name in spec:
        if name not in found.allowed:
            hint = (
                " (credentials come from env/config, not the store spec)"
                if "secret" in name or "key_id" in name or "token" in name or "password" in name
                else ""
            )
            raise CacheError(f"cache store spec ({kind}): unknown key {name!r}{hint}")
    for name in found.required:
        if not spec.get(name):
            raise CacheError(f"cache store spec ({kind}): missing {name!r}")
    return found.factory(spec, sftp_connect)


@register_store_type("local", allowed={"path"})
def _local(spec: Mapping[str, Any], sftp_connect: SftpConnect | None) -> Store:
    return LocalStore(spec.get("path"), name=spec.get("name"))
