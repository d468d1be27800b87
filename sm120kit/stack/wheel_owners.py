"""A lock whose wheels write one file with different bytes, refused at draft time.

A resolver treats distributions by name, not by the files they install, so a closure can hold
two whose wheels write the same path: vllm 0.33.0's held cuda-python 12.6.2.post1 (its own
``cuda/bindings/``) beside cuda-bindings 13.5.0 (the same 25 paths, other bytes; both
wheels' ``*.dist-info/RECORD``), and the installed env had whichever came last. Each wheel's
RECORD says what it installs and the hash of each file, so `lock.draft` reads them (the
draft has every wheel of the closure in the release cache already: the catalogue reads
them) and judges the closure with smoke's own rule for an installed env
(`sm120kit.remote.lib.file_owners`: `differing` finds the paths, `mixes_a_package` judges
each): a package directory mixed from two distributions refuses the draft with one line
naming both, a few paths and, when it can tell, the constraint that would fix it; a clash of
top-level single-file modules only (flashinfer-python 0.7.2.post1 and torch-c-dlpack-ext
0.1.5 both ship a top-level ``build_backend.py``, in the sglang 0.5.23 lock too) is one
review line, as smoke warns on it.

The fix it names: for each distribution of the pair that is not at its newest release on
the index, that newest release's wheel for the lock's Python and platform is read (when it
is at most `HINT_MAX` bytes); if it writes none of the clashing paths, the line says
``--constraint 'NAME>=NEWEST'`` (cuda-python 13.4.4 is a 5-file metapackage that requires
cuda-bindings instead of shipping it).
"""

from __future__ import annotations

import csv
import io
import os
import posixpath
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import RecipeError
from ..remote.lib import file_owners
from .lock import Lock, LockEntry
from .resolve import best_wheel, index_files, tag_priority

#: The clashing paths a refusal names (the count is always exact).
SHOWN = 3
#: The largest wheel read to tell which constraint would fix a clash (a metapackage is KB).
HINT_MAX = 64 << 20
#: RECORD rows under ``<name>.data/<key>/`` that an installer puts in site-packages; the other
#: keys (scripts, headers, data) go outside it, where smoke's check does not look either.
_SITE_KEYS = ("purelib", "platlib")


@dataclass(frozen=True)
class Clash:
    """Paths two (or more) distributions of one closure write with different bytes."""

    dists: tuple[str, ...]  # ``cuda-python 12.6.2.post1``, sorted
    paths: tuple[str, ...]  # relative to site-packages, sorted
    mixed: bool  # a package directory mixed (`file_owners.mixes_a_package`)


def site_path(name: str) -> str | None:
    """Where a wheel's RECORD path is installed, relative to site-packages, or None when it
    goes elsewhere (``<name>.data/scripts/...``, an absolute or ``..`` path)."""
    if name.startswith(("/", "..")):
        return None
    head, _, rest = name.partition("/")
    if head.endswith(".data"):
        key, _, inner = rest.partition("/")
        return posixpath.normpath(inner) if key in _SITE_KEYS and inner else None
    return posixpath.normpath(name)


def wheel_record(path: Path) -> dict[str, str]:
    """Installed path -> RECORD hash of every hashed row of the wheel at `path`."""
    try:
        with zipfile.ZipFile(path) as zf:
            name = next(
                (n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")),
                None,
            )
            text = zf.read(name).decode("utf-8") if name else ""
    except (OSError, zipfile.BadZipFile, UnicodeDecodeError, KeyError) as exc:
        raise RecipeError(f"{path.name}: cannot read its RECORD: {exc}") from None
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[1]:
            rel = site_path(row[0])
            if rel is not None:
                out[rel] = row[1]
    return out


def clashes(wheels: list[tuple[str, Path]]) -> list[Clash]:
    """The clashes of (label, wheel path) pairs: one install's distributions."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for label, path in wheels:
        for rel, digest in wheel_record(path).items():
            owners.setdefault(rel, []).append((label, digest))
    pairs: dict[tuple[str, ...], list[str]] = {}
    for rel, dists in file_owners.differing(owners).items():
        pairs.setdefault(tuple(dists), []).append(rel)
    return [
        Clash(dists, tuple(paths), any(file_owners.mixes_a_package(p) for p in paths))
        for dists, paths in sorted(pairs.items())
    ]


def _label(entry: LockEntry) -> str:
    return f"{entry.name} {entry.version}"


def _newest(entry: LockEntry, python: str, platform: str, indexes: list[str]) -> LockEntry | None:
    """The newest release of `entry`'s distribution on the first index that has it, as a
    lock entry for its wheel for (`python`, `platform`), when newer than `entry`'s."""
    prio = tag_priority(python, platform)
    mine = Version(entry.version)
    for index in indexes:
        files: dict[Version, list[dict[str, object]]] = {}
        for filename, url, sha in index_files(index, entry.name):
            try:
                name, version, _b, _t = parse_wheel_filename(filename)
            except (ValueError, InvalidVersion):
                continue
            if name != canonicalize_name(entry.name) or not sha:
                continue
            if version.is_prerelease and not mine.is_prerelease:
                continue
            files.setdefault(version, []).append(
                {"name": filename, "url": url, "hashes": {"sha256": sha}}
            )
        for version in sorted(files, reverse=True):
            chosen = best_wheel(files[version], prio)
            if chosen is None:
                continue
            if version <= mine:
                return None
            sha = str(chosen["hashes"]["sha256"]).lower()  # type: ignore[index]
            return LockEntry(
                entry.name, str(version), str(chosen["name"]), str(chosen["url"]), sha,
                "release", compiled=False,
            )  # fmt: skip
        if files:
            return None
    return None


def _size(url: str) -> int | None:
    """The size of the file at `url` (file:// or a HEAD request), None when unknown."""
    if url.startswith("file://"):
        try:
            return os.path.getsize(urllib.request.url2pathname(url[len("file://") :]))
        except OSError:
            return None
    try:
        req = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - index file URL
            length = resp.headers.get("Content-Length")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return int(length) if length and length.isdigit() else None


def fix_for(
    clash: Clash,
    entries: dict[str, LockEntry],
    *,
    python: str,
    platform: str,
    indexes: list[str],
    fetch: Callable[[LockEntry], Path],
) -> str | None:
    """The constraint that fixes `clash`, when the newest release of one of its
    distributions writes none of its paths (read from that wheel's RECORD); else None."""
    for label in clash.dists:
        entry = entries[label]
        try:
            newer = _newest(entry, python, platform, indexes)
        except RecipeError:
            return None  # an index we cannot read tells nothing; the refusal stands
        if newer is None:
            continue
        size = _size(newer.url)
        if size is None or size > HINT_MAX:
            continue
        try:
            record = wheel_record(fetch(newer))
        except RecipeError:
            continue
        if not set(clash.paths) & set(record):
            return (
                f"--constraint '{canonicalize_name(entry.name)}>={newer.version}' "
                f"({_label(newer)}, its newest release, writes none of these files)"
            )
    return None


def check_entries(
    entries: list[LockEntry],
    *,
    python: str,
    platform: str,
    indexes: list[str],
    fetch: Callable[[LockEntry], Path],
) -> list[Clash]:
    """Judge one closure's wheels (each obtained by `fetch`, checked against its sha256):
    RecipeError (one line) when two of them mix a package directory; otherwise the clashes
    that only touch top-level single-file modules (for `noted`)."""
    wheels = [e for e in entries if e.filename.endswith(".whl")]
    by_label = {_label(e): e for e in wheels}
    found = clashes([(_label(e), fetch(e)) for e in wheels])
    mixed = [c for c in found if c.mixed]
    if mixed:
        parts = []
        for clash in mixed:
            shown = ", ".join(clash.paths[:SHOWN])
            more = f" and {len(clash.paths) - SHOWN} more" if len(clash.paths) > SHOWN else ""
            fix = fix_for(
                clash, by_label, python=python, platform=platform, indexes=indexes, fetch=fetch
            )
            parts.append(
                f"{' and '.join(clash.dists)} both write {len(clash.paths)} file(s) in a "
                f"package directory with different bytes ({shown}{more}); fix: "
                + (fix or "constrain one of them so the other alone owns these files")
            )
        raise RecipeError(
            f"Python {python}: the closure would install a package mixed from two "
            f"distributions (their wheels' RECORDs), so whichever installs last breaks the "
            f"other; nothing written: {'; '.join(parts)}"
        )
    return [c for c in found if not c.mixed]


def noted(lock: Lock, benign: list[Clash]) -> Lock:
    """`lock` with a review note on each distribution of a benign clash (`check_entries`)."""
    notes: dict[str, list[str]] = {}
    for clash in benign:
        line = (
            f"{' and '.join(clash.dists)} both install {', '.join(clash.paths[:SHOWN])} with "
            "different bytes: top-level single-file modules only, no package mixed (smoke "
            "warns on it)"
        )
        for label in clash.dists:
            notes.setdefault(label, []).append(line)
    packages = tuple(
        replace(e, notes=(*e.notes, *notes[_label(e)])) if _label(e) in notes else e
        for e in lock.packages
    )
    return replace(lock, packages=packages)
