"""Which hosts held which released files at the end of earlier runs: the controller's record,
so that a later run's new host takes them from those hosts (host to host, `cache/peers.py`)
instead of from the controller store relayed over SFTP.

The record is ``<run_root>/holders.json``, written by the controller as each host leaves a
run's peers (`ops/stack_files.leave_peers`), from what the run saw: the sha256s the host
placed in its ``releases/`` (a file it had before the run is kept from the earlier record of
the same releases dir). It names only the host (by its inventory name), its releases dir and
the sha256s: no address, no credential; a later run reaches the host as the inventory says,
with the run's own SSH settings and host-key checks. A record that is wrong (files removed
since, another host under the name) only costs a 404 per file and the store's relay: the
taker trusts the lock's sha256, never the record.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

RECORD = "holders.json"
#: Hosts started as earlier holders for one file at most (each costs an SSH connection).
EARLIER_PER_FILE = 2


@dataclass(frozen=True)
class Held:
    """One host's released files as the record has them."""

    host: str
    releases: str
    sha256: frozenset[str]


def record_path(run_root: str) -> Path:
    """The record of the runs under `run_root` (the controller's ``run_root`` setting)."""
    return Path(os.path.expanduser(run_root)) / RECORD


def read_record(path: Path) -> dict[str, Held]:
    """The record's hosts; {} when it is missing or unreadable (a lost shortcut, never a
    failed run)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    hosts = doc.get("hosts") if isinstance(doc, dict) else None
    out: dict[str, Held] = {}
    for name, row in (hosts or {}).items():
        if not isinstance(row, dict):
            continue
        releases, shas = row.get("releases"), row.get("sha256")
        if isinstance(releases, str) and isinstance(shas, list):
            out[str(name)] = Held(str(name), releases, frozenset(str(s) for s in shas))
    return out


def record(path: Path, host: str, releases: str, sha256s: list[str]) -> None:
    """Add that `host` holds `sha256s` in `releases` (merged with what the record had for the
    same releases dir; another dir replaces it), under a lock: hosts of one run, and runs
    beside each other, write it at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        held = read_record(path)
        before = held.get(host)
        kept = before.sha256 if before is not None and before.releases == releases else frozenset()
        held[host] = Held(host, releases, kept | frozenset(sha256s))
        doc = {
            "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "hosts": {
                h.host: {"releases": h.releases, "sha256": sorted(h.sha256)}
                for h in sorted(held.values(), key=lambda h: h.host)
            },
        }
        part = path.with_name(f".{path.name}.{os.getpid()}.part")
        part.write_text(json.dumps(doc, indent=1), encoding="utf-8")
        os.replace(part, path)


def earlier_holders(
    held: dict[str, Held], sha256: str, in_run: frozenset[str], known: frozenset[str]
) -> list[Held]:
    """The record's holders of `sha256` a run may start as peers: in the inventory (`known`),
    not hosts of the run itself (`in_run`: they are peers already), by name."""
    return sorted(
        (h for h in held.values() if sha256 in h.sha256 and h.host in known - in_run),
        key=lambda h: h.host,
    )
