"""invoke.yaml's ``sm120kit.cache`` block and store specs, checked before anything connects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Sm120Error
from ..settings import BY_NAME, parse, parse_bool
from .registry import make_store
from .store import CacheError, LocalStore, default_local_root

#: Reserved store names (wheel_from "cache:<name>").
HOST_STORE = "host"
CONTROLLER_STORE = "local"
RUN_STORE = "run"

#: Defaults of invoke.yaml's ``sm120kit.cache`` block.
CACHE_DEFAULTS: dict[str, Any] = {
    "controller": None,  # None: $XDG_CACHE_HOME/sm120kit/wheels; false: no controller store
    "host_store": True,
    "stores": [],
    "wait_timeout": 7200.0,
    "stale_lock_after": 300.0,
    "poll_interval": 2.0,
}


@dataclass
class CacheConfig:
    """invoke.yaml's ``sm120kit.cache`` block, checked."""

    controller: str | None | bool = None
    host_store: bool = True
    stores: list[dict[str, Any]] = field(default_factory=list)
    wait_timeout: float = 7200.0
    stale_lock_after: float = 300.0
    poll_interval: float = 2.0

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> CacheConfig:
        """From the merged ``sm120kit`` settings (``settings(c)``); raises CacheError."""
        where = "invoke.yaml sm120kit.cache"
        section = settings.get("cache") or {}
        if not isinstance(section, Mapping):
            raise CacheError(f"{where}: expected a mapping, got {type(section).__name__}")
        unknown = sorted(set(section) - set(CACHE_DEFAULTS))
        if unknown:
            raise CacheError(
                f"{where}: unknown key {unknown[0]!r} (known: {', '.join(CACHE_DEFAULTS)})"
            )
        merged = {**CACHE_DEFAULTS, **dict(section)}
        # The same parser as every other setting's: "false" is false, "abc" and nan refused.
        try:
            controller = parse(BY_NAME["cache.controller"], merged["controller"], where)
            host_store = parse(BY_NAME["cache.host_store"], merged["host_store"], where)
            numbers = {
                name: parse(BY_NAME[f"cache.{name}"], merged[name], where)
                for name in ("wait_timeout", "stale_lock_after", "poll_interval")
            }
        except Sm120Error as exc:
            raise CacheError(str(exc)) from None
        stores = check_store_specs(merged["stores"], f"{where}.stores")
        return cls(
            controller=controller,
            host_store=host_store,
            stores=stores,
            **numbers,
        )

    def controller_store(self) -> LocalStore | None:
        """The controller's LocalStore (named ``local``), or None when turned off."""
        if self.controller is False:
            return None
        root = default_local_root() if self.controller is None else Path(str(self.controller))
        return LocalStore(root.expanduser(), name=CONTROLLER_STORE)


def truthy(value: Any) -> bool:
    """A setting or host var as a bool: only true/false/yes/no/1/0 (any case); anything else
    is a CacheError rather than a guess."""
    try:
        return parse_bool(value, "wheel cache setting")
    except Sm120Error as exc:
        raise CacheError(str(exc)) from None


def store_name(spec: Mapping[str, Any]) -> str:
    """A shared store's name: ``name``, else derived from its type and location."""
    if spec.get("name"):
        return str(spec["name"])
    if spec.get("type") == "s3":
        return f"s3:{spec.get('bucket')}/{str(spec.get('prefix') or '').strip('/')}".rstrip("/")
    if spec.get("type") == "sftp":
        return f"sftp:{spec.get('host')}:{spec.get('path')}"
    return f"{spec.get('type')}:{spec.get('path') or 'default'}"


def check_store_specs(value: Any, where: str) -> list[dict[str, Any]]:
    """Validate a list of store specs (without connecting); returns plain dicts with names."""
    if value in (None, ""):
        return []
    if not isinstance(value, (list, tuple)):
        raise CacheError(f"{where}: expected a list of stores, got {type(value).__name__}")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        if not isinstance(raw, Mapping):
            raise CacheError(f"{where}[{i}]: expected a mapping with a 'type'")
        spec = dict(raw)
        try:
            make_store(spec, sftp_connect=lambda s: None)  # validation only; nothing connects
        except CacheError as exc:
            raise CacheError(f"{where}[{i}]: {exc}") from None
        name = store_name(spec)
        if name in (HOST_STORE, CONTROLLER_STORE, RUN_STORE):
            raise CacheError(f"{where}[{i}]: store name {name!r} is reserved")
        if name in seen:
            raise CacheError(f"{where}[{i}]: duplicate store name {name!r}")
        seen.add(name)
        spec["name"] = name
        out.append(spec)
    return out
