"""Wheel cache: content-addressed keys for built wheels, the stores that keep them, and the
cache that looks a wheel up before a build and stores every build.

``key`` computes the key from everything that can change a wheel; ``store`` holds the Store
interface and the local store; ``registry`` maps a spec's ``type`` to its backend
(``make_store``); ``s3``/``sftp`` add remote stores and register themselves (their modules and
third-party libraries load on first use); ``manage`` lists, verifies, prunes, exports and
imports entries, and ``commands`` builds the ``invoke cache.*`` documents from it.

The cache used by builds is ``wheels.WheelCache`` (``wheels.cache_for(runner)``), a small
front over one module per job: ``config`` (invoke.yaml's block, store specs), ``resolve``
(which stores a host reads, opening them), ``health`` (back-off for unreachable stores),
``lookup`` (find and install a hit), ``place`` (the on-host copy-check-rename),
``election`` (one builder per key in a run), ``locks`` (the cross-run lock) and ``publish``
(store a fresh build). ``context`` types what the cache needs from a host's context and
``request`` the values these parts hand each other.
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
