"""Files two installed distributions both claim, with different contents.

A resolver treats distributions by name, not by the files they install: a lock can hold two
whose wheels write the same path (vllm 0.33.0's lock: cuda-python 12.6.2.post1, which
flashinfer-python 0.7.2.post1 asks for, and cuda-bindings 13.5.0 both list
``cuda/bindings/runtime.cpython-311-x86_64-linux-gnu.so`` in their RECORD). The installer
writes both; whichever came last is on disk and the other distribution is broken, with no
error until an import reaches the overwritten file. Identical bytes under one path
(a namespace package's ``__init__.py``) are harmless and not reported.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import csv
import glob
import os
from typing import Any

from sm120kit.remote.lib.files import record_digest

#: The clashing paths a check's details keep (the count is always exact).
SHOWN = 8


def records(site: str) -> dict[str, list[tuple[str, str]]]:
    """Path (relative to `site`) -> [(distribution, RECORD hash)] for every hashed row of every
    ``*.dist-info/RECORD`` under `site`."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for record in sorted(glob.glob(os.path.join(site, "*.dist-info", "RECORD"))):
        dist = os.path.basename(os.path.dirname(record))[: -len(".dist-info")]
        try:
            with open(record, newline="") as fh:
                rows = list(csv.reader(fh))
        except (OSError, csv.Error):
            continue
        for row in rows:
            if len(row) >= 2 and row[1] and not row[0].startswith(("..", "/")):
                owners.setdefault(os.path.normpath(row[0]), []).append((dist, row[1]))
    return owners


def differing(owners: dict[str, list[tuple[str, str]]]) -> dict[str, list[str]]:
    """Path -> the distributions (sorted) of every path that two or more of them claim with
    different hashes; the same bytes under one path (a namespace package's ``__init__.py``)
    are not a clash. One rule for an installed env (smoke) and a lock's wheels (lock.draft,
    `sm120kit.stack.wheel_owners`)."""
    return {
        rel: sorted({d for d, _h in claims})
        for rel, claims in sorted(owners.items())
        if len({h for _d, h in claims}) >= 2
    }


def mixes_a_package(path: str) -> bool:
    """Whether a clash at `path` (relative to site-packages) mixes two releases of a package:
    a path inside a package directory (cuda/bindings/ above: the import fails or runs the
    wrong one), where one of a top-level single-file module only is a wheel shipping a stray
    build script (flashinfer-python 0.7.2.post1 and torch-c-dlpack-ext 0.1.5 both install a
    top-level ``build_backend.py``: their RECORDs), which no import of either reaches. The one
    classifier: smoke fails the first and warns on the second; lock.draft refuses the first
    and lists the second for review."""
    return "/" in path.replace(os.sep, "/")


def clashes(site: str) -> list[dict[str, Any]]:
    """Every path of `site` two or more distributions claim with different hashes: the
    claimants and which one's bytes are on disk now (None: none of theirs)."""
    owners = records(site)
    out = []
    for rel, dists in differing(owners).items():
        now = record_digest(os.path.join(site, rel))
        winner = next((d for d, h in owners[rel] if h == now), None)
        out.append({"path": rel, "claimed_by": dists, "on_disk": winner})
    return out


def check(sites: list[str]) -> dict[str, Any]:
    """The smoke check ``file_owners`` over the env's site directories."""
    found: list[dict[str, Any]] = []
    for site in sites:
        if os.path.isdir(site):
            found += clashes(site)
    if not found:
        return {"check": "file_owners", "status": "pass",
                "reason": "no file is installed by two distributions with different contents",
                "details": {"clashes": 0}}  # fmt: skip
    pairs: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for item in found:
        pairs.setdefault(tuple(item["claimed_by"]), []).append(item)
    said = []
    for dists, items in sorted(pairs.items()):
        winners = sorted({i["on_disk"] or "none of them" for i in items})
        said.append(
            f"{' and '.join(dists)} both install {len(items)} file(s) with different contents "
            f"(e.g. {items[0]['path']}; on disk now: {', '.join(winners)})"
        )
    packaged = any(mixes_a_package(item["path"]) for item in found)
    return {
        "check": "file_owners",
        "status": "fail" if packaged else "warn",
        "reason": "; ".join(said)
        + (
            ": the distribution whose files were overwritten is broken"
            if packaged
            else ": top-level single-file modules only (no package is mixed)"
        ),
        "fix": "lock a set whose distributions do not write the same files (drop or re-pin one "
        "of each pair, e.g. a metapackage's old self-contained release beside its split-out "
        "successor), then provision again",
        "details": {"clashes": len(found), "shown": found[:SHOWN]},
    }
