"""Cubin sets a package names in its own files (docs/catalogue.md "Cubin sets"): kernels it
launches from cubins of its own rather than from an extension module's fatbin.

Two ways a wheel says it has them, both read here from the wheel's bytes:

- **shipped**: ``*.cubin`` files in the wheel, one set per directory; each cubin's SM target
  is read from its ELF header (`remote/lib/cubin.py`);
- **downloaded at run time**: the package's Python source names an artifact repository and
  the sets' paths under it. The convention read is flashinfer's (its ``artifacts.py`` and
  ``jit/cubin_loader.py``): a module-level ``<X>_REPOSITORY = os.environ.get("<ENV>",
  "<url>")``, a class ``ArtifactPath`` whose string fields that are relative paths are the
  sets' directories (and whose ``<SET>_ARCHS`` tuple, when present, names the per-arch
  directories the package downloads that set from), and a class ``CheckSumHash`` with the sha256 it pins for
  each set's ``checksums.txt``. The cubins of such a set are not in the wheel: its coverage of
  an arch is unknown until downloaded, unless the package names its per-arch directories.
"""

from __future__ import annotations

import ast
import posixpath
import re
import zipfile
from dataclasses import replace
from typing import Any

from ..remote.lib.cubin import CubinError, cubin_target
from ..remote.lib.cudaarch import arch_verdict, parse_cc, target_key
from .catalogue import CubinSet, ReleaseFacts

#: The names of flashinfer's convention (flashinfer/artifacts.py, flashinfer/jit/cubin_loader.py).
ARTIFACT_CLASS = "ArtifactPath"
CHECKSUM_CLASS = "CheckSumHash"
REPOSITORY_SUFFIX = "_REPOSITORY"
ARCHS_SUFFIX = "_ARCHS"
#: A set's directory under the repository: ``<commit>/fmha/trtllm-gen/`` (0.7.2), or without the
#: trailing slash (0.6.3's ``<commit>/batched_gemm-2a674db-79e4d37``).
_ARTIFACT_DIR = re.compile(r"^[\w.+-]+(/[\w.+-]+)+/?$")


def _not_on(name: str, archs: list[str], targets: tuple[str, ...], where: str) -> dict[str, str]:
    """Per target arch, why no cubin of the set runs there (its archs known)."""
    out = {}
    for arch in targets:
        cc = parse_cc(arch)
        if cc is None or not archs:
            continue
        status, _why = arch_verdict(archs, [], cc)
        if status == "fail":
            out[arch] = f"{name}: kernels for {', '.join(archs)} only ({where}): none for {arch}"
    return out


def shipped_sets(zf: zipfile.ZipFile, dist: str, targets: tuple[str, ...]) -> list[CubinSet]:
    """One set per directory of the wheel holding ``*.cubin`` files, archs from e_flags."""
    groups: dict[str, list[str]] = {}
    for name in zf.namelist():
        if name.endswith(".cubin"):
            groups.setdefault(posixpath.dirname(name), []).append(name)
    out = []
    for folder, names in sorted(groups.items()):
        found: set[str] = set()
        bad = 0
        for name in names:
            try:
                found.add(cubin_target(zf.read(name)))
            except CubinError:
                bad += 1
        archs = sorted(found, key=target_key)
        how = f"ELF e_flags of {len(names) - bad} cubins (remote/lib/cubin.py)"
        if bad:
            how += f"; {bad} not readable as cubins"
        out.append(
            CubinSet(
                name=folder,
                path=folder,
                shipped=True,
                files=len(names),
                archs=tuple(archs),
                archs_from=how,
                not_on=_not_on(f"{dist} {folder}", archs, targets, how),
                source=f"{folder}/*.cubin",
            )
        )
    return out


def _text(node: Any) -> str | None:
    """A string literal (implicit concatenation included) or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return left + right if left is not None and right is not None else None
    return None


def _fields(cls: ast.ClassDef) -> dict[str, Any]:
    """A class body's ``NAME = value`` / ``NAME: T = value`` fields: strings and string tuples."""
    out: dict[str, Any] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            key, value = stmt.target.id, stmt.value
        elif (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            key, value = stmt.targets[0].id, stmt.value
        else:
            continue
        if isinstance(value, ast.Tuple):
            items = [_text(e) for e in value.elts]
            if all(i is not None for i in items):
                out[key] = tuple(items)
        elif value is not None and _text(value) is not None:
            out[key] = _text(value)
    return out


def _repository(stmt: ast.stmt) -> tuple[str, str, str] | None:
    """``(variable, env, url)`` of ``X_REPOSITORY = os.environ.get("ENV", "url")``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target, call = stmt.targets[0], stmt.value
    if not (isinstance(target, ast.Name) and target.id.endswith(REPOSITORY_SUFFIX)):
        return None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    if call.func.attr not in ("get", "getenv") or len(call.args) != 2:
        return None
    env, url = _text(call.args[0]), _text(call.args[1])
    if env is None or url is None or "://" not in url:
        return None
    return target.id, env, url


def downloaded_sets(zf: zipfile.ZipFile, dist: str, targets: tuple[str, ...]) -> list[CubinSet]:
    """The sets the package's source names under an artifact repository (flashinfer's
    convention, above); none when the source names no repository or no ``ArtifactPath``."""
    repo: tuple[str, str, str, str] | None = None
    paths: dict[str, Any] = {}
    sums: dict[str, Any] = {}
    where = ""
    for name in sorted(zf.namelist()):
        if not name.endswith(".py") or ".dist-info/" in name:
            continue
        data = zf.read(name)
        if REPOSITORY_SUFFIX.encode() not in data and ARTIFACT_CLASS.encode() not in data:
            continue
        try:
            tree = ast.parse(data)
        except SyntaxError:
            continue
        for stmt in tree.body:
            found = _repository(stmt)
            if found and repo is None:
                repo = (name, *found)
            if isinstance(stmt, ast.ClassDef) and stmt.name == ARTIFACT_CLASS and not paths:
                paths, where = _fields(stmt), name
            if isinstance(stmt, ast.ClassDef) and stmt.name == CHECKSUM_CLASS and not sums:
                sums = _fields(stmt)
    if repo is None or not paths:
        return []
    repo_file, variable, env, base = repo
    out = []
    for key, path in paths.items():
        if not isinstance(path, str) or not _ARTIFACT_DIR.match(path):
            continue
        url = base.rstrip("/") + "/" + path.strip("/") + "/"
        archs = sorted(paths.get(key + ARCHS_SUFFIX) or (), key=target_key)
        source = f"{where} {ARTIFACT_CLASS}.{key}"
        how = ""
        if archs:
            how = (
                f"{where} {ARTIFACT_CLASS}.{key}{ARCHS_SUFFIX}: the per-arch directories "
                "the package downloads this set from"
            )
        unknown = {}
        for arch in targets:
            if not archs:
                unknown[arch] = (
                    f"{dist} {key}: cubins downloaded at run time from {url} ({source}; "
                    f"{repo_file} {variable}, ${env} replaces the repository), not in the "
                    f"wheel: which archs they hold is unknown until downloaded"
                )
        checksum = sums.get(key)
        out.append(
            CubinSet(
                name=key,
                path=path,
                shipped=False,
                url=url,
                url_env=env,
                checksums_sha256=checksum if isinstance(checksum, str) else "",
                archs=tuple(archs),
                archs_from=how,
                not_on=_not_on(f"{dist} {key}", list(archs), targets, how) if archs else {},
                unknown=unknown,
                source=source,
            )
        )
    return out


def cubin_sets(zf: zipfile.ZipFile, dist: str, targets: tuple[str, ...]) -> tuple[CubinSet, ...]:
    """Every cubin set the wheel ships or its source names (docs/catalogue.md)."""
    return (*shipped_sets(zf, dist, targets), *downloaded_sets(zf, dist, targets))


def resolve_shipped(releases: list[ReleaseFacts]) -> list[ReleaseFacts]:
    """Sets a package downloads, found shipped by another distribution of the same lock (the
    same path under a cubin directory: flashinfer-cubin's ``flashinfer_cubin/cubins/<path>``,
    which flashinfer reads instead of downloading when its version equals flashinfer's,
    ``flashinfer/jit/env.py`` ``_get_cubin_dir()``): their archs and coverage are those read
    from the shipped cubins, the download URL kept."""
    shipped = [(rel, s) for rel in releases for s in rel.cubin_sets if s.shipped and s.archs]
    out = []
    for rel in releases:
        sets = []
        for s in rel.cubin_sets:
            tail = "/" + s.path.strip("/")
            found = next(
                ((r, c) for r, c in shipped
                 if r.distribution != rel.distribution and r.versions == rel.versions
                 and ("/" + c.path.strip("/")).endswith(tail)),
                None,
            ) if not s.shipped and not s.archs else None  # fmt: skip
            if found is None:
                sets.append(s)
                continue
            by, c = found
            where = f"{by.distribution} {by.versions[0]} {c.path}"
            sets.append(
                replace(
                    s,
                    archs=c.archs,
                    archs_from=f"{c.archs_from} in {where}",
                    not_on={
                        a: f"{rel.distribution} {s.name}: shipped in {where}: {why}"
                        for a, why in c.not_on.items()
                    },  # fmt: skip
                    unknown={},
                    shipped_in=where,
                )
            )
        out.append(replace(rel, cubin_sets=tuple(sets)))
    return out
