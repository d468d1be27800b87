"""The table of store types the backends register into (`register_store_type`) and
`sm120kit.cache.registry` reads. Apart from the registry so that a backend imports this table,
never the registry that imports the backend by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sm120kit.cache.store import Store

#: ``sftp_connect(spec)`` returns a paramiko SFTPClient (e.g. a fabric connection's ``.sftp()``).
SftpConnect = Callable[[Mapping[str, Any]], Any]
#: A backend's factory: a checked spec (and an optional SFTP connector) in, a Store out.
StoreFactory = Callable[[Mapping[str, Any], "SftpConnect | None"], Store]


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
