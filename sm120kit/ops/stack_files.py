"""How a host gets a lock's released files: from the wheel stores, so a fleet downloads each once.

A locked file (a released wheel pinned by URL and sha256) is looked up, fetched and shared
through the same wheel cache as a built wheel (sm120kit/cache/wheels.py), under a key made of
its name, version and sha256 alone (`release_inputs`): the host store is left out (the
host's own copy is ``<work_root>/releases/<sha256>/<filename>``), the controller store and the
shared stores serve it. On a miss one host of the run is elected per file and downloads it
from the lock's URL (`install_lock` ``fetch``: sha256 checked on the host); the cache then
puts it in the controller and shared stores, and the other hosts of the run take it from
there. A later run, or a host without access to the index, finds it in the stores.

One shortcut comes first: the controller's own copy of a file (its release cache filled by
``lock.draft``, or a ``file://`` index) goes to the controller's ``local`` host by hard link,
and to a remote host over SSH only for a ``file://`` URL a remote host cannot reach.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import shutil
import time

from ..cache.key import KeyInputs
from ..cache.request import BuiltWheel
from ..cache.wheels import cache_for
from ..errors import HostFailed
from ..lock import LockEntry
from ..lock_draft import cached_copy, local_path
from ..runner import HostContext

#: ``source_digest`` tag of a released file: the sha256 of the file itself (a build's
#: sources are ``sha256:`` of an sdist, ``git:`` or ``tree:``), so the two never share a key.
RELEASE_TAG = "release-sha256:"


def release_inputs(entry: LockEntry) -> KeyInputs:
    """The wheel-cache inputs of a released file: what it is (name, version) and its bytes
    (sha256); nothing about the host that fetches it."""
    return KeyInputs(
        package=entry.name,
        version=entry.version,
        source_digest=RELEASE_TAG + entry.sha256,
        platform=entry.filename,
    )


def controller_copy(ctx: HostContext, entry: LockEntry, dest: str) -> bool:
    """Hand the controller's own copy of `entry` to the host at `dest`, when that is cheaper
    than any download: hard-linked (or copied) for this machine's ``local`` host, sent over
    SSH only for a ``file://`` index a remote host cannot reach. False when it does not
    apply."""
    here = cached_copy(entry)
    if here is None:
        return False
    if ctx.host.is_local:
        os.makedirs(posixpath.dirname(dest), exist_ok=True)
        part = dest + ".part"
        try:
            os.link(here, part)
        except OSError:  # another filesystem
            shutil.copyfile(here, part)
        os.replace(part, dest)
        return True
    if local_path(entry.url) is not None:
        ctx.run(f"mkdir -p {shlex.quote(posixpath.dirname(dest))}")
        ctx.put(str(here), dest + ".part")
        ctx.run(f"mv -f {shlex.quote(dest + '.part')} {shlex.quote(dest)}")
        return True
    return False


def obtain_release(ctx: HostContext, entry: LockEntry, dest: str) -> tuple[str, int]:
    """Put `entry`'s file at `dest` on the host. Returns where it came from (``"controller"``,
    ``"index"`` when this host downloaded it, ``"cache:<store>"``) and the bytes this host
    downloaded from the index."""
    if controller_copy(ctx, entry, dest):
        return "controller", 0
    fetched: list[int] = []

    def download() -> BuiltWheel:
        start = time.monotonic()
        doc = ctx.script(
            "install_lock",
            {
                "action": "fetch",
                "entries": [
                    {
                        "name": entry.name,
                        "version": entry.version,
                        "url": entry.url,
                        "sha256": entry.sha256,
                        "dest": dest,
                    }
                ],
            },
        )
        if not doc.get("ok"):
            raise HostFailed(f"{ctx.host.name}: {doc.get('error')}")
        fetched.append(sum(int(n) for _, n in doc.get("downloaded") or []))
        return BuiltWheel(dest, entry.sha256, time.monotonic() - start, "")

    got = cache_for(ctx.runner).obtain(
        ctx, release_inputs(entry), download, posixpath.dirname(dest), download=True
    )
    if got.path and posixpath.basename(got.path) != entry.filename:
        raise HostFailed(f"{ctx.host.name}: {entry.filename} arrived as {got.path}")
    return ("index" if got.wheel_from == "build" else got.wheel_from), sum(fetched)


__all__ = ["RELEASE_TAG", "controller_copy", "obtain_release", "release_inputs"]
