"""Wheel cache: content-addressed keys for built wheels and the stores that keep them.

``key`` computes the key from everything that can change a wheel; ``store`` holds the Store
interface and the local store; ``registry`` maps a spec's ``type`` to its backend
(``make_store``); ``s3``/``sftp`` add remote stores and register themselves (their modules and
third-party libraries load on first use); ``manage`` lists, verifies, prunes, exports and
imports entries.
"""

from __future__ import annotations

from sm120kit.cache.key import (
    CACHE_FORMAT_VERSION,
    KeyInputs,
    compute_key,
    describe,
    filter_build_env,
    git_digest,
    patch_digests,
    sdist_digest,
    tree_digest,
)
from sm120kit.cache.registry import make_store
from sm120kit.cache.store import (
    DEFAULT_STALE_AFTER,
    CacheError,
    CorruptEntry,
    EntryMissing,
    LocalStore,
    LockOwner,
    Store,
    default_local_root,
)

__all__ = [
    "CACHE_FORMAT_VERSION",
    "DEFAULT_STALE_AFTER",
    "CacheError",
    "CorruptEntry",
    "EntryMissing",
    "KeyInputs",
    "LocalStore",
    "LockOwner",
    "Store",
    "compute_key",
    "default_local_root",
    "describe",
    "filter_build_env",
    "git_digest",
    "make_store",
    "patch_digests",
    "sdist_digest",
    "tree_digest",
]
