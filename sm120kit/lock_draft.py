"""Draft a lock (sm120kit/lock.py) from a top-level requirement, for a person to review.

The resolver is pip's own: ``pip install --dry-run --ignore-installed --report`` with
``--only-binary=:all:``, ``--python-version`` and one ``--platform`` per manylinux tag the
lock's platform accepts (pip does not expand ``manylinux_2_34`` to the older tags itself), so
the closure is the one pip would install on such a host, from the indexes pip is configured
with on the controller (``pip config list`` says which). Each distribution's URL and sha256
come from the report's ``download_info`` (the index's own hash), never from a name.

Every platform-specific wheel is then obtained once (a ``file://`` URL is read in place;
others are downloaded into the controller's release cache, ``~/.cache/sm120kit/releases``,
by sha256) and read: whether it holds shared objects (``compiled``), its size, and for a
compiled one the verification a host runs before install (`release_check.verify_locked`) for
the target given (a recipe's lowest driver and its arch). The verdicts and notes go into the
lock for review; nothing here edits a recipe.
"""

from __future__ import annotations

import datetime
import json
import os
import posixpath
import re
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from .errors import RecipeError
from .lock import Lock, LockEntry, lock_dir_name, lock_file_name
from .release_check import verdict_line, verify_locked
from .remote.lib.download import DownloadFailed, download
from .remote.lib.files import sha256_file
from .remote.lib.wheel_check import shared_objects

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


def platform_tags(platform: str) -> list[str]:
    """``manylinux_2_34_x86_64`` -> every manylinux tag a glibc 2.34 host accepts, newest
    first, with the legacy aliases (manylinux2014 = 2_17, manylinux2010 = 2_12,
    manylinux1 = 2_5)."""
    m = _MANYLINUX.match(platform)
    if not m:
        raise RecipeError(f"--platform {platform}: expected a tag like manylinux_2_34_x86_64")
    glibc, machine = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(glibc, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{machine}" for minor, name in legacy.items() if minor <= glibc]
    return tags


def pip_argv(
    top: str, python: str, platform: str, report: str, target: str, index: str | None = None
) -> list[str]:
    """The resolver's command line (the interpreter running this tool runs pip). `index`:
    resolve from that index alone (``--isolated --index-url``: no pip configuration, no
    find-links), so every URL is one a host can reach; default: pip's configuration."""
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed"]
    if index:
        argv[3:3] = ["--isolated"]
        argv += ["--index-url", index]
    argv += ["--report", report, "--target", target, "--python-version", python]
    for tag in platform_tags(platform):
        argv += ["--platform", tag]
    return [*argv, "--only-binary=:all:", "--disable-pip-version-check", top]


def resolve(
    top: str, python: str, platform: str, index: str | None = None
) -> tuple[dict[str, Any], str]:
    """pip's installation report for `top` on (`python`, `platform`), and pip's version."""
    with tempfile.TemporaryDirectory(prefix="sm120kit-lock-") as tmp:
        report = os.path.join(tmp, "report.json")
        argv = pip_argv(top, python, platform, report, os.path.join(tmp, "target"), index)
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(report):
            lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")]
            tail = lines[-1] if lines else (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise RecipeError(f"pip cannot resolve {top} for Python {python} on {platform}: {tail}")
        with open(report, encoding="utf-8") as fh:
            doc: dict[str, Any] = json.load(fh)
    return doc, str(doc.get("pip_version", "?"))


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
                    return ".".join(spec.version.split(".")[:2])
    return "cpu"


def entries_from_report(report: dict[str, Any]) -> list[LockEntry]:
    """One entry per distribution pip would install: its file, URL and the index's sha256."""
    out = []
    for item in report.get("install") or []:
        meta, info = item.get("metadata") or {}, item.get("download_info") or {}
        url = str(info.get("url", ""))
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        sha = hashes.get("sha256") or str(
            (info.get("archive_info") or {}).get("hash", "")
        ).removeprefix("sha256=")
        filename = urllib.parse.unquote(url.rsplit("/", 1)[-1])
        if not sha or not filename.endswith(".whl"):
            raise RecipeError(
                f"{meta.get('name')} {meta.get('version')}: pip's report gives no wheel with a "
                f"sha256 ({url or 'no URL'}); a lock needs both"
            )
        out.append(
            LockEntry(
                name=str(meta["name"]),
                version=str(meta["version"]),
                filename=filename,
                url=url,
                sha256=sha.lower(),
                source="release",
                compiled=not filename.endswith("-any.whl"),
            )
        )
    return out


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


def draft_lock(
    top: str,
    *,
    python: str,
    platform: str,
    target: Target | None,
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
    report: dict[str, Any] | None = None,
    index: str | None = None,
) -> Lock:
    """Resolve `top`, obtain and read each platform-specific wheel, return the lock (not yet
    written). `report`: a pip report already made (tests), instead of running pip."""
    try:
        req = Requirement(top)
    except InvalidRequirement:
        raise RecipeError(f"--top {top!r}: not a requirement like sglang==0.5.23") from None
    if len(req.specifier) != 1 or next(iter(req.specifier)).operator != "==":
        raise RecipeError(f"--top {top}: pin one version exactly (name==version)")
    resolver = "pip install --dry-run --ignore-installed --report"
    if report is None:
        report, pip_version = resolve(top, python, platform, index)
        resolver = f"pip {pip_version} {resolver[4:]}" + (
            f" --isolated --index-url {index}" if index else ""
        )
    entries = entries_from_report(report)
    cache = cache or release_cache()
    done = []
    for entry in entries:
        if entry.compiled:
            if progress:
                progress(f"{entry.name} {entry.version}: {entry.filename}")
            entry = inspect_entry(entry, obtain(entry, cache), target)
        done.append(entry)
    torch = next((e for e in done if e.key == "torch"), None)
    torch_meta = next(
        (
            i["metadata"]
            for i in report.get("install") or []
            if canonicalize_name(i["metadata"]["name"]) == "torch"
        ),
        None,
    )
    return Lock(
        path=Path(),
        top=top,
        python=python,
        platform=platform,
        torch=Version(torch.version).public if torch else "",
        torch_cuda=torch_cuda(list(torch_meta.get("requires_dist") or [])) if torch_meta else "cpu",
        resolver=resolver,
        drafted=datetime.date.today().isoformat(),
        packages=tuple(done),
        target={"driver": target.driver, "arch": target.arch} if target else {},
        indexes=tuple(_indexes(done)),
    )


def _indexes(entries: list[LockEntry]) -> list[str]:
    """Where the files came from: each URL's scheme and host (or file directory)."""
    out: list[str] = []
    for e in entries:
        parsed = urllib.parse.urlparse(e.url)
        where = f"{parsed.scheme}://{parsed.netloc}" if parsed.netloc else os.path.dirname(e.url)
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


def stack_table(lock: Lock, lock_path: str, reason: str) -> str:
    """The recipe's ``[stack]`` table for this lock, as TOML to paste."""
    return "\n".join(
        [
            "[stack]",
            f'top = "{lock.top}"',
            f'locks = "{posixpath.dirname(lock_path)}"',
            f'reason = "{reason}"',
        ]
    )
