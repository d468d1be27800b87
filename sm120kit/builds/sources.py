"""The controller's source store: a package's pinned source and every build dependency of it,
fetched once on the controller and uploaded to hosts, so that no build host needs GitHub.

A recipe package with ``dependencies`` (a CMake build's FetchContent trees) is
"store-managed": its own source and each dependency are one `SourceEntry` each, identified by
(package, directory name, ref). `fetch_entry` gets an entry into the store, from

- the mirror (setting or host var ``sources_mirror``): a directory holding one directory per
  entry, named by the entry's ``dir`` (the package's own, ``cutlass``, ``deepgemm``, ...), each
  the tree at the pinned commit (the package's own tree is its ``subdir``, not the whole
  repository). A ``MANIFEST.tsv`` in the mirror or its parent directory (columns ``name``,
  ``upstream_repo``, ``commit``, ...) is read when present: a listed commit that differs from
  the recipe's ref is recorded as the entry's ``note`` and shown by both tasks (the mirror
  is the operator's word; the digest, which the wheel-cache key includes, tells trees apart);
- else git over the network (`sm120kit.remote.lib.sourcetree.git_export`: a bare repository per
  origin under the store, fetch by commit), submodules listed in the recipe included.

Each stored entry is ``<store>/<package>/<dir>@<ref>/`` with ``tree.tar`` (a deterministic tar:
sorted paths, mtime 0, modes 0644/0755) and ``source.json`` (its digest, size, file count,
where it came from). The digest is `fetch_source.tree_hash` of the tree: sorted relative
paths, the executable bit, link targets, sizes and file contents; hosts check the same hash
after unpacking, and the wheel-cache key includes it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import HostFailed, RecipeError
from ..remote.lib import sourcetree as fs
from ..remote.lib.files import sha256_file
from .packing import pack_tree  # the same deterministic tar the path sources use

RECORD = "source.json"
TARBALL = "tree.tar"


@dataclass(frozen=True)
class SourceEntry:
    """One tree the build reads: the package's own source, or a dependency of it."""

    package: str
    dir: str  # directory name in the mirror and the store
    url: str
    ref: str
    subdir: str = ""
    fetchcontent: str = ""  # CMake FetchContent name; "" for the package itself
    submodules: tuple[tuple[str, str, str], ...] = ()  # (path, url, ref)

    @property
    def define(self) -> str:
        """The CMake override variable (CMake upper-cases the name and keeps the dashes)."""
        return f"FETCHCONTENT_SOURCE_DIR_{self.fetchcontent.upper()}" if self.fetchcontent else ""

    @property
    def slot(self) -> str:
        return f"{self.dir}@{self.ref}"


def default_store() -> Path:
    """``$XDG_CACHE_HOME/sm120kit/sources`` (``~/.cache/sm120kit/sources``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sm120kit" / "sources"


def store_dir(settings: dict[str, Any] | None) -> Path:
    """The store directory: setting ``sources_store``, else `default_store`."""
    value = (settings or {}).get("sources_store")
    return Path(os.path.expanduser(str(value))) if value else default_store()


class PackageSources(Protocol):
    """What the store reads of a recipe package: its source and its FetchContent dependencies
    (a host's resolved `recipe_resolved.PackageValues`, or a recipe file's
    `recipe_model.PackageSpec`)."""

    @property
    def source(self) -> Mapping[str, str]: ...

    @property
    def dependencies(self) -> Sequence[Mapping[str, Any]]: ...


def is_managed(pkg: PackageSources) -> bool:
    """Whether the package's sources go through the store (it lists dependencies)."""
    return bool(pkg.dependencies) and pkg.source.get("kind") == "git"


def entries(name: str, pkg: PackageSources) -> list[SourceEntry]:
    """The package's own source, then each dependency, from its recipe values."""
    source = pkg.source
    if source.get("kind") != "git" or not source.get("ref"):
        raise RecipeError(f"package {name}: the source store needs a pinned git source")
    subdir = source.get("subdir") or ""
    own = SourceEntry(name, os.path.basename(subdir) or name, source["url"], source["ref"], subdir)
    deps = [
        SourceEntry(
            name,
            str(d["dir"]),
            str(d["url"]),
            str(d["ref"]),
            fetchcontent=str(d["name"]),
            submodules=tuple(
                (str(s["path"]), str(s["url"]), str(s["ref"])) for s in _submodules(d)
            ),
        )
        for d in pkg.dependencies
    ]
    return [own, *deps]


def _submodules(dependency: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(dependency.get("submodules") or [])


def read_record(store: Path, entry: SourceEntry) -> dict[str, Any] | None:
    """The stored record of `entry` when its tarball is there too, else None."""
    slot = store / entry.package / entry.slot
    try:
        record = json.loads((slot / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not (slot / TARBALL).is_file():
        return None
    record["tarball"] = str(slot / TARBALL)
    return record


def _manifest_commit(mirror: Path, name: str) -> str | None:
    """The commit a mirror's MANIFEST.tsv lists for directory `name` (first word), if any."""
    for path in (mirror / "MANIFEST.tsv", mirror.parent / "MANIFEST.tsv"):
        if not path.is_file():
            continue
        with path.open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                if row.get("name") == name and row.get("commit"):
                    return row["commit"].split()[0]
    return None


def _from_mirror(entry: SourceEntry, mirror: Path, target: Path) -> tuple[str, str]:
    """(origin, note): a copy of the mirror's tree for `entry`."""
    src = mirror / entry.dir
    if not src.is_dir():
        raise FileNotFoundError(str(src))
    listed = _manifest_commit(mirror, entry.dir)
    note = ""
    if listed and not (listed.startswith(entry.ref) or entry.ref.startswith(listed)):
        note = f"the mirror's MANIFEST.tsv lists {listed}, not the pinned {entry.ref}"
    shutil.copytree(src, target, symlinks=True)
    return f"mirror {src}", note


def _from_git(entry: SourceEntry, store: Path, target: Path) -> str:
    cache = store / ".git"
    cache.mkdir(parents=True, exist_ok=True)
    try:
        resolved = fs.git_export(entry.url, entry.ref, entry.subdir, str(cache), str(target))
        for path, url, ref in entry.submodules:
            fs.git_export(url, ref, "", str(cache), str(target / path))
    except fs.FetchError as exc:
        raise HostFailed(
            f"{entry.package}: cannot fetch {entry.dir} ({entry.url}@{entry.ref}): {exc}; "
            "set sources_mirror to a directory holding "
            f"{entry.dir}/ (docs/{entry.package}.md)"
        ) from None
    return f"git {entry.url}@{resolved}"


def fetch_entry(
    store: Path, entry: SourceEntry, mirror: str | Path | None = None, refresh: bool = False
) -> tuple[dict[str, Any], bool]:
    """(record, changed): `entry` in the store, fetched from the mirror or git if missing.

    A stored entry is trusted: a commit names one tree. `refresh` reads it again anyway (a
    mirror that was corrected, or patched on purpose, still claims the same commit) and
    replaces the stored tree only when the digest differs, so an unchanged tree stays
    unchanged (changed False) and keeps its record.
    """
    have = read_record(store, entry)
    if have is not None and not refresh:
        return have, False

    slot = store / entry.package / entry.slot
    slot.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=slot.parent, prefix=".fetch-") as work:
        tree = Path(work) / "tree"
        origin, note = None, ""
        if mirror:
            try:
                origin, note = _from_mirror(entry, Path(os.path.expanduser(str(mirror))), tree)
            except FileNotFoundError:
                origin = None
        if origin is None:
            origin = _from_git(entry, store, tree)
        tar, digest = pack_tree(tree, Path(work) / "out", entry.dir, skip_outputs=False)
        files = [p for p in tree.rglob("*") if p.is_file() or p.is_symlink()]
        record = {
            "package": entry.package,
            "dir": entry.dir,
            "fetchcontent": entry.fetchcontent,
            "url": entry.url,
            "ref": entry.ref,
            "digest": digest,
            "files": len(files),
            "size": sum(p.lstat().st_size for p in files),
            "tar_sha256": sha256_file(str(tar)),
            "origin": origin,
            "note": note,
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        if have is not None and have.get("digest") == digest:
            return have, False
        new = Path(work) / "slot"
        new.mkdir()
        os.replace(tar, new / TARBALL)
        (new / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        if slot.exists():
            shutil.rmtree(slot)
        os.replace(new, slot)
    record["tarball"] = str(slot / TARBALL)
    return record, True


def fetch_all(
    store: Path,
    wanted: Iterable[SourceEntry],
    mirror: str | Path | None = None,
    refresh: bool = False,
) -> list[tuple[dict[str, Any], bool]]:
    """`fetch_entry` for each entry, in order."""
    return [fetch_entry(store, e, mirror, refresh) for e in wanted]


def list_store(store: Path) -> list[dict[str, Any]]:
    """Every stored record (package, dir, ref, digest, size, files, origin), sorted."""
    rows = []
    if store.is_dir():
        for record_path in sorted(store.glob(f"*/*/{RECORD}")):
            try:
                record = json.loads(record_path.read_text())
            except (OSError, ValueError):
                continue
            tar = record_path.parent / TARBALL
            record["present"] = tar.is_file()
            rows.append(record)
    return rows


def mirror_setting(settings: dict[str, Any] | None, host_vars: dict[str, Any] | None = None) -> str:
    """The mirror directory: host var ``sources_mirror``, else the setting, else ""."""
    for source in (host_vars or {}, settings or {}):
        value = source.get("sources_mirror")
        if value:
            return str(value)
    return ""


__all__ = [
    "RECORD",
    "TARBALL",
    "SourceEntry",
    "default_store",
    "entries",
    "fetch_all",
    "fetch_entry",
    "is_managed",
    "list_store",
    "mirror_setting",
    "read_record",
    "store_dir",
]
