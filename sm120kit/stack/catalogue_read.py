"""Make a lock's catalogue (`sm120kit.stack.catalogue`) from its wheels: each wheel is
obtained like `lock.draft` obtains it (the controller's release cache, by sha256, the sha256
checked against the lock) and read with the tool's own readers (`remote/lib/elf.py`,
`remote/lib/fatbin.py`, the same ones verification and smoke use).

Read from each wheel: every shared object's fatbin targets (loaded, relocatable, and fatbin
containers elsewhere in the file), its ``NEEDED libcudart.so.N`` and the nvcc release string,
the METADATA's CUDA requirements, the loader's per-arch directories (from the package's own
Python source, when it has per-arch module directories), the files that look up a CUDA
toolchain at run time, the cubin sets it ships or names (`catalogue_cubins`) and the arch
gates its source writes (`catalogue_gates`). Pure-Python
wheels are read too: every distribution of the lock has an entry.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import struct
import tempfile
import time
import zipfile
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from ..packages import registry
from ..remote.lib.cudaarch import arch_verdict, parse_cc, target_key
from ..remote.lib.elf import Elf, ElfError
from ..remote.lib.fatbin import (
    FATBIN_CONTAINER_HEADER,
    FATBIN_MAGIC,
    FATBIN_SECTIONS,
    RELOCATABLE_SECTION,
    elf_targets,
    fatbin_entries,
)
from .catalogue import (
    Catalogue,
    CubinSet,
    LoaderFacts,
    ModuleFacts,
    ReleaseFacts,
    WheelFacts,
    merge_versions,
    norm,
)
from .catalogue_cubins import cubin_sets, resolve_shipped
from .catalogue_gates import arch_gates
from .draft import obtain, release_cache
from .lock import LOCK_FILE, LockEntry, load_lock

_RELEASE = re.compile(rb"Cuda compilation tools, release (\d+)\.(\d+), V(\d+\.\d+\.\d+)")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)$")
_VARIANT_DIR = re.compile(r"^(?P<pkg>[^/]+)/(?P<dir>sm\d+)/(?P<stem>[^/.]+)\.[^/]*so$")
#: Distributions whose requirement names the CUDA a wheel runs with.
_CUDA_DIST = re.compile(r"^(nvidia-.*-cu\d+|nvidia-cuda-runtime.*|cuda-toolkit|cuda-python)$")
#: A run-time CUDA toolchain lookup in a package's Python source.
_JIT = re.compile(r"CUDA_HOME|CUDA_PATH|\bnvcc\b")


def aliases() -> dict[str, str]:
    """Aliases the catalogue records: a distribution renamed on PyPI, from the package
    descriptors (each knows the names it is published under; sm120kit/packages/)."""

    return {d.name: n for d in registry.descriptors() if d.name for n in d.distributions}


def _sorted_targets(targets: set[str]) -> tuple[str, ...]:
    # SASS before PTX, each by arch: one order on every run.
    return tuple(sorted(targets, key=lambda t: (t.startswith("compute_"), target_key(t))))


def _container_targets(raw: Any, pos: int) -> set[str] | None:
    """The targets of the one fatbin container whose header is at `pos`, or None when no
    container header is there."""
    if pos + FATBIN_CONTAINER_HEADER > len(raw):
        return None
    _magic, _ver, hsize, psize = struct.unpack_from("<IHHQ", raw, pos)
    if hsize < FATBIN_CONTAINER_HEADER:
        return None
    stop = min(pos + hsize + psize, len(raw))
    # fatbin_entries parses the first container of the range; a later magic inside this
    # payload would be another container, counted on its own.
    first = fatbin_entries(raw, pos, stop)
    return {e["target"] for e in first}


def _outside(elf: Elf) -> tuple[int, set[str]]:
    """Fatbin containers outside the loaded and relocatable sections (cuFFT keeps thousands
    there and loads them itself): (count, targets)."""
    known = sorted(
        r for name in (*FATBIN_SECTIONS, RELOCATABLE_SECTION) for r in elf.section_ranges(name)
    )
    magic = struct.pack("<I", FATBIN_MAGIC)
    raw = elf.data
    count, pos = 0, 0
    found: set[str] = set()
    while True:
        pos = raw.find(magic, pos)
        if pos < 0:
            return count, found
        inside = next((stop for start, stop in known if start <= pos < stop), None)
        if inside is not None:
            pos = inside
            continue
        targets = _container_targets(raw, pos)
        if targets is not None:
            count += 1
            found |= targets
        pos += 4


def not_on_reason(mod: ModuleFacts, dist: str, version: str, cc: tuple[int, int]) -> str | None:
    """Why `mod` cannot run on capability `cc`, or None when it can (SASS for it, PTX it can
    JIT) or holds no device code at all (nothing of it misses the arch)."""
    status, _reason = arch_verdict(list(mod.sass), list(mod.ptx), cc)
    if status != "fail":
        return None
    where = f"{cc[0]}.{cc[1]}"
    code = ", ".join([*mod.sass, *mod.ptx])
    line = f"{dist} {version} {mod.path}: .nv_fatbin holds {code} only: no code for {where}"
    if mod.relocatable:
        line += (
            f"; relocatable device code (__nv_relfatbin, never loaded) holds "
            f"{', '.join(mod.relocatable)}"
        )
    if mod.outside_count:
        line += (
            f"; {mod.outside_count:,} fatbin containers outside .nv_fatbin hold "
            f"{', '.join(mod.outside)} (loaded by the library itself if at all)"
        )
    return line


def read_module(
    name: str, path: str, dist: str, version: str, targets: tuple[str, ...]
) -> ModuleFacts:
    """One shared object's facts (`name`: its path in the wheel)."""
    try:
        elf = Elf(path)
    except (ElfError, OSError) as exc:
        return ModuleFacts(name, error=f"not a readable ELF file: {exc}")
    try:
        sass, ptx, _has = elf_targets(elf)
        reloc = {e["target"] for s, t in elf.section_ranges(RELOCATABLE_SECTION)
                 for e in fatbin_entries(elf.data, s, t)}  # fmt: skip
        count, outside = _outside(elf)
        needed = list(elf.dynamic().get("needed") or [])
        found = _RELEASE.search(elf.data)
        nvcc = found.group(3).decode() if found else None
    finally:
        elf.close()
    majors = sorted({int(m.group(1)) for n in needed for m in [_CUDART.match(n)] if m})
    mod = ModuleFacts(
        path=name,
        sass=tuple(sass),
        ptx=tuple(ptx),
        relocatable=_sorted_targets(reloc),
        outside=_sorted_targets(outside),
        outside_count=count,
        cudart=majors[0] if majors else None,
        nvcc=nvcc,
    )
    not_on = {}
    for arch in targets:
        cc = parse_cc(arch)
        why = not_on_reason(mod, dist, version, cc) if cc else None
        if why:
            not_on[arch] = why
    return replace(mod, not_on=not_on)


def _is_so(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


def _modules(
    zf: zipfile.ZipFile, dist: str, version: str, targets: tuple[str, ...]
) -> list[ModuleFacts]:
    out = []
    with tempfile.TemporaryDirectory(prefix="catalogue-") as tmp:
        for info in zf.infolist():
            if not _is_so(info.filename):
                continue
            copy = os.path.join(tmp, "module.so")
            with zf.open(info) as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            out.append(read_module(info.filename, copy, dist, version, targets))
            os.unlink(copy)
    return out


def _branch_dir(body: list[ast.stmt], dirs: set[str]) -> str | None:
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Constant) and node.value in dirs:
                return str(node.value)
    return None


def _capability(test: ast.expr) -> str | None:
    """``"9.0"`` for ``x == 90`` (major * 10 + minor), ``"*"`` for any other test."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.comparators[0], ast.Constant)
        and isinstance(test.comparators[0].value, int)
    ):
        value = test.comparators[0].value
        return f"{value // 10}.{value % 10}"
    return "*"


def read_loader(zf: zipfile.ZipFile) -> LoaderFacts | None:
    """The per-arch directory rule of a package whose wheel holds one module in several
    ``<pkg>/smNN/`` directories, read from the ``if``/``elif``/``else`` chain of its Python
    source that names those directories (for example a loader whose ``== 90`` branch picks
    sm90, another GPU sm100, none sm100: docs/catalogue.md). None when the wheel has no such directories or no source names them."""
    dirs: dict[str, set[str]] = {}
    stems: dict[str, str] = {}
    for name in zf.namelist():
        m = _VARIANT_DIR.match(name)
        if m:
            dirs.setdefault(m.group("pkg"), set()).add(m.group("dir"))
            stems[m.group("pkg")] = m.group("stem")
    for pkg, names in dirs.items():
        if len(names) < 2:
            continue
        for src in sorted(
            n for n in zf.namelist() if n.startswith(pkg + "/") and n.endswith(".py")
        ):
            try:
                tree = ast.parse(zf.read(src))
            except SyntaxError:
                continue
            for func in ast.walk(tree):
                if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(func):
                    found = _if_chain(node, names) if isinstance(node, ast.If) else None
                    if found:
                        variants, none = found
                        return LoaderFacts(pkg, stems[pkg], variants, none, f"{src} {func.name}()")
    return None


def _if_chain(node: ast.If, dirs: set[str]) -> tuple[dict[str, str], str] | None:
    variants: dict[str, str] = {}
    cur: ast.stmt | None = node
    none = ""
    while isinstance(cur, ast.If):
        picked = _branch_dir(cur.body, dirs)
        if picked is None:
            return None
        key = _capability(cur.test)
        if key == "*" and variants.get("*"):
            break
        variants.setdefault(key or "*", picked)
        nxt = cur.orelse
        if len(nxt) == 1 and isinstance(nxt[0], ast.If):
            cur = nxt[0]
            continue
        none = _branch_dir(nxt, dirs) or ""
        break
    if "*" not in variants or len(variants) < 2:
        return None
    return variants, none


def _metadata(zf: zipfile.ZipFile) -> list[str]:
    name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
    if name is None:
        return []
    text = zf.read(name).decode("utf-8", "replace")
    return [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]  # fmt: skip


def cuda_requires(requires: list[str]) -> tuple[str, ...]:
    """The Requires-Dist entries that name a CUDA distribution (``nvidia-*-cu13``, the CUDA
    runtime), as written."""
    out = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if _CUDA_DIST.match(norm(req.name)):
            out.append(text)
    return tuple(out)


def jit_lookup(zf: zipfile.ZipFile) -> tuple[str, ...]:
    """The package's Python files that look up a CUDA toolchain (``CUDA_HOME``, ``nvcc``)."""
    out = []
    for name in sorted(zf.namelist()):
        if (
            name.endswith(".py")
            and ".dist-info/" not in name
            and _JIT.search(zf.read(name).decode("utf-8", "replace"))
        ):
            out.append(name)
    return tuple(out)


@dataclass(frozen=True)
class Read:
    """One wheel read: its release's facts (one version, one wheel) and seconds taken."""

    release: ReleaseFacts
    seconds: float


def read_wheel(path: Path, entry: LockEntry, targets: tuple[str, ...]) -> Read:
    """The facts of the lock entry's wheel at `path` (already checked against its sha256)."""
    start = time.monotonic()
    dist = norm(entry.name)
    with zipfile.ZipFile(path) as zf:
        modules = _modules(zf, dist, entry.version, targets)
        py = sum(1 for n in zf.namelist() if n.endswith(".py"))
        release = ReleaseFacts(
            distribution=dist,
            versions=(entry.version,),
            wheels=(WheelFacts(entry.version, entry.filename, entry.sha256, tuple(modules), py),),
            cuda_requires=cuda_requires(_metadata(zf)),
            loader=read_loader(zf),
            jit_lookup=jit_lookup(zf),
            cubin_sets=cubin_sets(zf, dist, targets),
            arch_gates=arch_gates(zf, dist, entry.version, targets),
        )
    return Read(release, time.monotonic() - start)


def _one_version(releases: list[ReleaseFacts]) -> list[ReleaseFacts]:
    """The wheels of one distribution and version (cp311, cp312) as one release."""
    out: dict[tuple[str, str], ReleaseFacts] = {}
    for rel in releases:
        key = (rel.distribution, rel.versions[0])
        have = out.get(key)
        out[key] = rel if have is None else ReleaseFacts(
            distribution=have.distribution,
            versions=have.versions,
            wheels=have.wheels + rel.wheels,
            cuda_requires=tuple(dict.fromkeys(have.cuda_requires + rel.cuda_requires)),
            loader=have.loader or rel.loader,
            jit_lookup=tuple(dict.fromkeys(have.jit_lookup + rel.jit_lookup)),
            cubin_sets=_union_sets(have.cubin_sets, rel.cubin_sets),
            arch_gates=have.arch_gates + tuple(
                g for g in rel.arch_gates if g.name not in {h.name for h in have.arch_gates}
            ),
        )  # fmt: skip
    return list(out.values())


def _union_sets(a: tuple[CubinSet, ...], b: tuple[CubinSet, ...]) -> tuple[CubinSet, ...]:
    """The cubin sets of two wheels of one release, each name once (the first read)."""
    seen = {s.name: s for s in b}
    seen.update({s.name: s for s in a})
    return tuple(seen[n] for n in dict.fromkeys([*(s.name for s in a), *(s.name for s in b)]))


def lock_entries(lock_dir: Path) -> list[LockEntry]:
    """The entries of every lock in `lock_dir`, each file (sha256) once: compiled and pure
    wheels alike (a pure one may name cubin sets; without any it is "nothing to check")."""
    seen: dict[str, LockEntry] = {}
    for entries in lock_entries_by_file(lock_dir).values():
        for entry in entries:
            if entry.filename.endswith(".whl"):
                seen.setdefault(entry.sha256, entry)
    return list(seen.values())


def lock_entries_by_file(lock_dir: Path, skip: Collection[str] = ()) -> dict[str, list[LockEntry]]:
    """Each lock file's entries in `lock_dir` by its name, in name order, but the files named
    in `skip` (locks about to be replaced); no directory yet: none."""
    if not lock_dir.is_dir():
        return {}
    names = sorted(
        p.name for p in lock_dir.iterdir() if LOCK_FILE.match(p.name) and p.name not in skip
    )
    return {n: list(load_lock(lock_dir / n, str(lock_dir / n)).packages) for n in names}


def make_catalogue(
    entries: list[LockEntry],
    *,
    targets: tuple[str, ...] = ("12.0",),
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
    keep: Callable[[LockEntry, Path], None] | None = None,
) -> tuple[Catalogue, dict[str, float]]:
    """The catalogue of `entries`' wheels (each obtained and checked against its sha256 by
    `lock_draft.obtain`), and the seconds each took to read by file name. `keep(entry,
    path)`, when given, is called after each read (to delete a downloaded file)."""
    cache = cache or release_cache()
    releases, seconds = [], {}
    for entry in entries:
        if progress:
            progress(f"{entry.name} {entry.version}: {entry.filename}")
        path = obtain(entry, cache)
        read = read_wheel(path, entry, targets)
        releases.append(read.release)  # every distribution, pure-Python ones included
        seconds[entry.filename] = read.seconds
        if keep:
            keep(entry, path)
    merged = merge_versions(resolve_shipped(_one_version(releases)))
    return Catalogue(tuple(merged), targets=targets, aliases=aliases()), seconds
