"""Draft a lock (sm120kit/stack/lock.py) from a top-level requirement, for a person to review.

The resolver is uv (`sm120kit.stack.resolve`: ``uv pip compile --format pylock.toml`` for
each Python X.Y and the platform, from the indexes given, PyPI's by default), so a lock can be
drafted for any Python from any controller; each distribution's one wheel is the one a host's
installer picks, with the index's own sha256. A wheel stub's real wheel is taken from its
index when that index is given; any other sdist-only distribution stops the draft for that
Python with one line.

Every platform-specific wheel is then obtained once (once for all Pythons: by sha256) (a ``file://`` URL is read in place;
others are downloaded into the controller's release cache, ``~/.cache/sm120kit/releases``,
by sha256) and read: whether it holds shared objects (``compiled``), its size, and for a
compiled one the verification a host runs before install (`release_check.verify_locked`) for
the target given (a recipe's lowest driver and its arch). The verdicts and notes go into the
lock for review; nothing here edits a recipe.
"""

from __future__ import annotations

import datetime
import os
import posixpath
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..drivers import CudaVersion
from ..errors import RecipeError
from ..remote.lib.download import DownloadFailed, download
from ..remote.lib.files import sha256_file
from ..remote.lib.wheel_check import shared_objects
from .lock import Lock, LockEntry, lock_dir_name, lock_file_name
from .release_check import verdict_line, verify_locked
from .resolve import (
    PYPI,
    Wheel,
    compile_pylock,
    metadata_requires,
    parse_index,
    parse_pin,
    resolve_missing,
    split_pylock,
)
from .wheel_owners import check_entries, noted

_MANYLINUX = re.compile(r"^manylinux_2_(\d+)_(x86_64|aarch64)$")
#: Distributions whose pinned version names the CUDA of a torch build (torch's METADATA).
_CUDA_PINS = (
    "cuda-toolkit",
    "nvidia-cuda-runtime",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime-cu13",
)


def release_cache() -> Path:
    """The controller's cache of released wheels, by sha256 (``SM120KIT_RELEASE_CACHE``)."""
    root = os.environ.get("SM120KIT_RELEASE_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "sm120kit" / "releases"


def torch_cuda(requires: list[str]) -> str:
    """The CUDA X.Y of a torch build from its Requires-Dist (the CUDA runtime it pins), or
    ``cpu`` when it pins none."""
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) in _CUDA_PINS:
            for spec in req.specifier:
                if spec.operator == "==":
                    return CudaVersion.parse(spec.version).xy
    return "cpu"


def entries_from_wheels(wheels: list[Wheel]) -> list[LockEntry]:
    """One lock entry per chosen wheel (``compiled`` provisionally from the tag: a
    platform-specific wheel is read to know)."""
    return [
        LockEntry(
            name=w.name,
            version=w.version,
            filename=w.filename,
            url=w.url,
            sha256=w.sha256,
            source="release",
            compiled=not w.filename.endswith("-any.whl"),
            size=w.size,
        )
        for w in wheels
    ]


def local_path(url: str) -> Path | None:
    """The path of a ``file://`` URL, else None."""
    parsed = urllib.parse.urlparse(url)
    return Path(urllib.parse.unquote(parsed.path)) if parsed.scheme == "file" else None


def obtain(entry: LockEntry, cache: Path) -> Path:
    """The entry's file on the controller: read in place for ``file://``, else downloaded
    once into `cache` (``<sha256>/<filename>``); its sha256 checked either way."""
    here = local_path(entry.url)
    if here is not None:
        got = sha256_file(str(here))
        if got != entry.sha256:
            raise RecipeError(
                f"{entry.name} {entry.version}: {here} has sha256 {got}, "
                f"the index lists {entry.sha256}"
            )
        return here
    dest = cache / entry.sha256 / entry.filename
    if dest.exists() and sha256_file(str(dest)) == entry.sha256:
        return dest
    part = dest.with_name(dest.name + ".part")
    try:
        download(entry.url, str(part), entry.sha256, timeout=180)
    except DownloadFailed as exc:
        raise RecipeError(f"{entry.name} {entry.version}: {exc}") from None
    os.replace(part, dest)
    return dest


def cached_copy(entry: LockEntry, cache: Path | None = None) -> Path | None:
    """The controller's copy of a locked file when one is here already (plan reads it, never
    downloads): the ``file://`` path or the release cache's file of that sha256."""
    here = local_path(entry.url)
    if here is not None:
        return here if here.is_file() else None
    path = (cache or release_cache()) / entry.sha256 / entry.filename
    return path if path.is_file() else None


@dataclass
class Target:
    """What the verdicts are for: a driver, an arch, the Python, modules not for the arch."""

    driver: str
    arch: str
    python: str
    not_for_arch: dict[str, str] = field(default_factory=dict)
    loaders: dict[str, dict[str, str]] = field(default_factory=dict)


def inspect_entry(entry: LockEntry, path: Path, target: Target | None) -> LockEntry:
    """Size, whether it holds shared objects, and (compiled, with a target) the verdict."""
    size = path.stat().st_size
    compiled = bool(shared_objects(str(path)))
    if not compiled or target is None:
        return replace(entry, size=size, compiled=compiled)
    doc = verify_locked(
        str(path),
        sha256=entry.sha256,
        driver=target.driver,
        arch=target.arch,
        python=target.python,
        not_for_arch=target.not_for_arch,
        variants=target.loaders.get(entry.key),
    )
    return replace(
        entry, size=size, compiled=True, verdict=verdict_line(doc), notes=tuple(doc["notes"])
    )


def index_list(index: str | None = None, indexes: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The indexes to resolve from, in order, each checked (`lock_resolve.parse_index`);
    PyPI's when none is given."""
    given = ([index] if index else []) + list(indexes)
    out: list[str] = []
    for item in given:
        url = parse_index(item)
        if url not in out:
            out.append(url)
    return out or [PYPI]


@dataclass
class Resolved:
    """One Python's resolution, before any file is read."""

    python: str
    entries: list[LockEntry]
    resolver: str
    constraints: tuple[str, ...] = ()


def resolve_python(
    top: str,
    python: str,
    platform: str,
    indexes: list[str],
    pylock: dict[str, Any] | None = None,
    constraints: tuple[str, ...] = (),
) -> Resolved:
    """uv's resolution of `top` for one Python under `constraints`, one wheel per
    distribution (a wheel stub's from its index when that index is given); RecipeError (one
    line) when it cannot be locked. `pylock`: uv's document already made (tests), instead
    of running uv."""
    resolver = "given"
    if pylock is None:
        pylock, resolver = compile_pylock(top, python, platform, indexes, constraints)
    wheels, missing = split_pylock(pylock, python, platform)
    wheels += resolve_missing(missing, python, platform, indexes)
    if not wheels:
        raise RecipeError(f"uv resolved {top} for Python {python} to nothing: nothing to lock")
    return Resolved(python, entries_from_wheels(wheels), resolver, constraints)


def finish_lock(
    top: str,
    resolved: Resolved,
    *,
    platform: str,
    target: Target | None,
    cache: Path,
    progress: Callable[[str], None] | None = None,
    seen: dict[str, LockEntry] | None = None,
) -> Lock:
    """Obtain and read each platform-specific wheel of one resolution (`seen`: entries
    already read, by sha256, so a file shared by several Pythons is read once), and return
    the lock (not yet written)."""
    seen = {} if seen is None else seen
    done = []
    torch_requires: list[str] = []
    for entry in resolved.entries:
        if entry.compiled:
            known = seen.get(entry.sha256)
            if known is not None:
                entry = replace(known, name=entry.name, version=entry.version)
            else:
                if progress:
                    progress(f"{entry.name} {entry.version}: {entry.filename}")
                path = obtain(entry, cache)
                entry = inspect_entry(entry, path, target)
                seen[entry.sha256] = entry
            if entry.key == "torch":
                torch_requires = metadata_requires(str(_copy_of(entry, cache)))
        elif entry.size is None and _copy_of(entry, cache).is_file():
            # An index that lists no sizes (a plain PEP 503 page): the wheel-owners check has
            # the file here already, and fan-out wants every file's length up front.
            entry = replace(entry, size=_copy_of(entry, cache).stat().st_size)
        done.append(entry)
    torch = next((e for e in done if e.key == "torch"), None)
    return Lock(
        path=Path(),
        top=top,
        python=resolved.python,
        platform=platform,
        torch=Version(torch.version).public if torch else "",
        torch_cuda=torch_cuda(torch_requires) if torch else "cpu",
        resolver=resolved.resolver,
        drafted=datetime.date.today().isoformat(),
        packages=tuple(done),
        target={"driver": target.driver, "arch": target.arch} if target else {},
        indexes=tuple(_indexes(done)),
        constraints=resolved.constraints,
    )


def _copy_of(entry: LockEntry, cache: Path) -> Path:
    return local_path(entry.url) or cache / entry.sha256 / entry.filename


def draft_lock(
    top: str,
    *,
    python: str,
    platform: str,
    target: Target | None,
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
    pylock: dict[str, Any] | None = None,
    index: str | None = None,
    indexes: list[str] | tuple[str, ...] = (),
    constraints: tuple[str, ...] = (),
) -> Lock:
    """Resolve `top` for one Python with uv under `constraints`, refuse a closure whose
    wheels write one file with different bytes (`wheel_owners.check_entries`), obtain and
    read each platform-specific wheel, return the lock (not yet written)."""
    top = parse_pin(top)
    where = index_list(index, indexes)
    resolved = resolve_python(top, python, platform, where, pylock, constraints)
    cache = cache or release_cache()
    benign = check_entries(
        resolved.entries,
        python=python,
        platform=platform,
        indexes=where,
        fetch=lambda e: obtain(e, cache),
    )
    lock = finish_lock(
        top,
        resolved,
        platform=platform,
        target=target,
        cache=cache,
        progress=progress,
    )
    return noted(lock, benign)


def _indexes(entries: list[LockEntry]) -> list[str]:
    """Where the files came from: each URL's scheme and host (or file directory)."""
    out: list[str] = []
    for e in entries:
        parsed = urllib.parse.urlparse(e.url)
        # A private index's credentials never go into the lock (a file people commit).
        netloc = parsed.netloc.rpartition("@")[2]
        where = f"{parsed.scheme}://{netloc}" if netloc else os.path.dirname(e.url)
        if where not in out:
            out.append(where)
    return out


def default_lock_name(top: str, python: str, platform: str) -> str:
    """``locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml``."""
    return f"locks/{lock_dir_name(top)}/{lock_file_name(python, platform)}"


def review(lock: Lock, recipe_torch: str | None, build_sources: dict[str, str]) -> list[str]:
    """What a person must look at before the lock is used: refusals, notes, local files,
    a torch other than the recipe's, packages the recipe could build instead."""
    lines = []
    for e in lock.packages:
        if e.verdict.startswith("refused"):
            lines.append(f"{e.name} {e.version}: {e.verdict}")
        for note in e.notes:
            lines.append(f"{e.name} {e.version}: note: {note}")
        if local_path(e.url) is not None:
            lines.append(
                f"{e.name} {e.version}: from a local index ({e.url}): hosts get it from the controller"
            )
        if e.key in build_sources:
            lines.append(
                f"{e.name} {e.version}: the recipe pins a source for it ({build_sources[e.key]}): "
                "build it with stack.build"
            )
    if recipe_torch and Version(recipe_torch).public != lock.torch:
        lines.append(
            f"torch {lock.torch} (lock) differs from the recipe's [torch] {recipe_torch}: the "
            "serving env gets the lock's; stack builds are built against it"
        )
    return lines


def stack_table(
    lock: Lock, lock_path: str, reason: str, shared: str | None = None, torch_index: str = ""
) -> str:
    """The recipe's ``[stack]`` table for this lock, as TOML to paste; for a recipe whose
    ``[stack]`` uses a shared stack (`shared`), that stack's line of
    ``recipes/shared/stacks.toml`` instead (every recipe using it follows). With
    `torch_index` (the line's torch index today) the line carries the lock's torch, which
    the recipes without a ``[torch]`` of their own take."""
    if shared:
        fields = f'top = "{lock.top}", locks = "{posixpath.dirname(lock_path)}"'
        if torch_index and lock.torch:
            fields += (
                f', torch = {{ version = "{Version(lock.torch).public}", index = "{torch_index}",'
                f' cuda = "{lock.torch_cuda}" }}'
            )
        return (
            f"# recipes/shared/stacks.toml, [stacks] {shared}:\n"
            f'{shared} = {{ {fields}, reason = "{reason}" }}'
        )
    return "\n".join(
        [
            "[stack]",
            f'top = "{lock.top}"',
            f'locks = "{posixpath.dirname(lock_path)}"',
            f'reason = "{reason}"',
        ]
    )
