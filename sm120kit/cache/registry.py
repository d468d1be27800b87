"""Store types by name: each backend registers the type it implements; ``make_store`` builds one.

The model is pyinfra's connector registry: a backend module (``sftp.py``, ``s3.py``) imports
the base (``store.py``: the Store interface and the local directory store) and the type table
(``store_types.py``), and registers a factory there; neither the base nor this registry imports a backend. The
backends that ship with sm120kit are named in :data:`BUILTIN_BACKENDS` and loaded by name the
first time their type is asked for (the way pyinfra loads its connectors' entry points), so a
store's third-party library loads only when such a store is configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any

from sm120kit.cache.store import CacheError, LocalStore, Store

# The table and its decorator live in store_types.py, which the backends import: a backend
# importing this module, which imports it by name, was a cycle (tests/rules/test_imports.py).
from sm120kit.cache.store_types import (
    _TYPES,
    SftpConnect,
    StoreFactory,
    StoreType,
    register_store_type,
)

__all__ = [
    "BUILTIN_BACKENDS",
    "SftpConnect",
    "StoreFactory",
    "StoreType",
    "known_types",
    "make_store",
    "register_store_type",
    "store_type",
]

#: Store type -> module that registers it, imported on first use of the type (``local`` is
#: part of the base and registered below).
BUILTIN_BACKENDS: dict[str, str] = {
    "sftp": "sm120kit.cache.sftp",
    "s3": "sm120kit.cache.s3",
}


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
