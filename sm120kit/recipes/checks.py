"""Recipe schema: the keys each table takes and the check of each value (one `_Bad` per
problem; the caller adds file, line and key)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .. import drivers as drv
from ..remote.lib.arch import Arch

METHODS = ("runfile", "pip", "apt")
#: Source kind -> (required keys, optional keys) besides ``kind``.
SOURCE_KINDS: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    "path": (frozenset({"path"}), frozenset()),
    # note: what the pinned tree is when it is not the release itself (the closest tree read);
    # it describes the entry's own ref, so an override of source.ref drops it (model.py).
    "git": (frozenset({"url", "ref"}), frozenset({"subdir", "note"})),
    "pypi": (frozenset(), frozenset({"index", "sha256"})),
}
_SOURCE_KEYS = frozenset({"kind", "path", "url", "ref", "subdir", "note", "index", "sha256"})

_TOP_REQUIRED = {"name", "description", "drivers", "arch", "python", "cuda"}
_TOP_OPTIONAL = {"packages", "stack", "torch"}  # torch: else the shared stack's (files.py)
_CUDA_REQUIRED = {"version", "method", "gcc_max"}
_CUDA_OPTIONAL = {"mirror", "runfile", "sha256", "pip_packages", "choices"}
_CHOICE_REQUIRED = {"drivers", "version"}
_CHOICE_OPTIONAL = {"method", "gcc_max", "runfile", "sha256", "pip_packages"}
_TORCH_KEYS = {"version", "index", "cuda"}
_PKG_REQUIRED = {"name", "version", "source"}
_PKG_OPTIONAL = {
    "patches",
    "knobs",
    "torch",
    "needs_cuda_torch",
    "smoke",
    "build",
    "dependencies",
}
#: ``[packages.smoke]``: what `smoke` should know about the package (not overridable).
_SMOKE_KEYS = {"not_for_arch"}
#: ``[packages.build]``: what the pinned tree's build does that the descriptor's reasons need
#: (read from that tree; not overridable): `not_set` options the tool leaves unset -> why,
#: `no_full_build` why upstream's full build cannot be pinned ("" = it can).
_BUILD_KEYS = {"not_set", "no_full_build"}
#: Choice fields that belong to one toolkit version only.
_PER_VERSION = ("runfile", "sha256", "pip_packages")

_RUNFILE_RE = re.compile(r"^cuda_(\d+\.\d+\.\d+)_[\d.]+_linux\.run$")
_INDEX_CUDA_RE = re.compile(r"/whl/(cpu|cu(\d+))/?$")

# --------------------------------------------------------------------------- value checks


class _Bad(ValueError):
    """A value failed a check; the caller adds where it came from."""


def _str(value: Any) -> str:
    if isinstance(value, float):
        raise _Bad(f"write {value!r} as a quoted string (YAML/TOML read it as a number)")
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {type(value).__name__} {value!r}")
    return value


def _nonempty(value: Any) -> str:
    s = _str(value).strip()
    if not s:
        raise _Bad("must not be empty")
    return s


def _spec(value: Any) -> str:
    s = _nonempty(value)
    try:
        SpecifierSet(s)
    except InvalidSpecifier:
        raise _Bad(f"not a version specifier: {s!r} (e.g. '>=580.65.06,<590')") from None
    return s


def _driver_spec(value: Any) -> str:
    s = _spec(value)
    for spec in SpecifierSet(s):
        text = spec.version.removesuffix(".*")
        try:
            drv.parse_driver_version(text)
        except ValueError:
            raise _Bad(f"{spec} does not name a driver version (digits and dots)") from None
    return s


def _version(value: Any) -> str:
    s = _nonempty(value)
    try:
        Version(s)
    except InvalidVersion:
        raise _Bad(f"not a version: {s!r}") from None
    return s


def _toolkit(value: Any) -> str:
    try:
        return drv.canonical_toolkit(_nonempty(value))
    except ValueError as e:
        raise _Bad(str(e)) from None


def _method(value: Any) -> str:
    s = _str(value)
    if s not in METHODS:
        raise _Bad(f"{s!r} is not one of {', '.join(METHODS)}")
    return s


def _gcc(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 99:
        raise _Bad(f"expected a GCC major version (an integer), got {value!r}")
    return value


def _url(value: Any) -> str:
    s = _nonempty(value)
    if "://" not in s:
        raise _Bad(f"expected a URL (scheme://...), got {s!r}")
    return s.rstrip("/")


def _url_or_empty(value: Any) -> str:
    return "" if _str(value) == "" else _url(value)


def _runfile(value: Any) -> str:
    s = _str(value)
    if s and not _RUNFILE_RE.match(s):
        raise _Bad(f"{s!r} is not a runfile name like cuda_13.0.2_580.95.05_linux.run")
    return s


def _sha256(value: Any) -> str:
    s = _str(value).strip().lower()
    if s and not re.fullmatch(r"[0-9a-f]{64}", s):
        raise _Bad('expected 64 hex digits, or "" for unknown')
    return s


def _str_list(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise _Bad(f"expected a list of strings, got {type(value).__name__}")
    return [_nonempty(v) for v in value]


def _python(value: Any) -> str:
    s = _str(value)
    if not re.fullmatch(r"3\.\d+", s):
        raise _Bad(f"expected a Python X.Y like '3.11', got {s!r}")
    return s


def _python_list(value: Any) -> list[str]:
    """``python``: X.Y, or a list of them in order of preference (first = most preferred)."""
    if isinstance(value, (str, float)):
        return [_python(value)]  # a float (3.1) gets _str's "write it as a quoted string"
    if not isinstance(value, list) or not value:
        raise _Bad(
            f"expected a Python X.Y or a non-empty list of them like ['3.11', '3.12'], got {value!r}"
        )
    out = [_python(v) for v in value]
    dup = sorted({v for v in out if out.count(v) > 1})
    if dup:
        raise _Bad(f"{', '.join(dup)} listed more than once")
    return out


def _index(value: Any) -> str:
    s = _nonempty(value)
    if s != "pypi" and "://" not in s:
        raise _Bad(f"expected 'pypi' or an index URL, got {s!r}")
    return s


def _torch_cuda(value: Any) -> str:
    s = _str(value)
    if s != "cpu" and not re.fullmatch(r"\d+\.\d+", s):
        raise _Bad(f"expected the torch build's CUDA 'X.Y' or 'cpu', got {s!r}")
    return s


def _arch_list(value: Any) -> list[str]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        s = str(item) if isinstance(item, float) else _str(item)
        try:
            Arch.parse_entry(s)
        except ValueError:
            raise _Bad(f"{s!r} is not an arch like '12.0' (suffix a/f or +PTX allowed)") from None
        out.append(s)
    if not out:
        raise _Bad("must list at least one arch")
    return out


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"expected true or false, got {value!r}")
    return value


def _knob(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)):
        return value
    raise _Bad(f"a knob must be a string, number or boolean, got {type(value).__name__}")


def _patches(value: Any) -> list[str]:
    out = _str_list(value)
    for p in out:
        if p.startswith("/") or ".." in Path(p).parts:
            raise _Bad(f"patch {p!r} must be a path relative to patches/")
    return out


def _source_value(value: Any) -> str:
    return _str(value)


_DEP_REQUIRED = ("name", "dir", "url", "ref")
#: cmake_minimum: the VERSION of the dependency's own cmake_minimum_required, for a tree the
#: build configures as a subproject (the descriptor sets CMake's policy floor from it).
_DEP_OPTIONAL = ("submodules", "cmake_minimum")
_SUBMODULE_KEYS = ("path", "url", "ref")
_DIR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _dependencies(value: Any) -> list[dict[str, Any]]:
    """``[{name, dir, url, ref, submodules?, cmake_minimum?}]``: the build's own source dependencies
    (CMake FetchContent names), fetched by the tool instead of at configure time."""
    if not isinstance(value, list):
        raise _Bad("expected a list of { name, dir, url, ref } tables")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, dep in enumerate(value):
        if not isinstance(dep, dict):
            raise _Bad(f"dependency {i}: expected a table {{ name, dir, url, ref }}")
        unknown = set(dep) - set(_DEP_REQUIRED) - set(_DEP_OPTIONAL)
        missing = [k for k in _DEP_REQUIRED if not dep.get(k)]
        if unknown or missing:
            what = f"unknown key(s) {sorted(unknown)}" if unknown else f"missing {missing}"
            raise _Bad(f"dependency {i} ({dep.get('name', '?')}): {what}")
        entry: dict[str, Any] = {k: _str(dep[k]) for k in _DEP_REQUIRED}
        if not _DIR_RE.match(entry["dir"]) or entry["dir"] in seen:
            raise _Bad(f"dependency {entry['name']}: dir {entry['dir']!r} is not a unique name")
        seen.add(entry["dir"])
        subs = dep.get("submodules") or []
        if not isinstance(subs, list) or not all(
            isinstance(s, dict) and set(s) == set(_SUBMODULE_KEYS) for s in subs
        ):
            raise _Bad(f"dependency {entry['name']}: submodules must be [{{ path, url, ref }}]")
        for s in subs:
            if s["path"].startswith("/") or ".." in Path(s["path"]).parts:
                raise _Bad(f"dependency {entry['name']}: submodule path {s['path']!r}")
        entry["submodules"] = [{k: _str(s[k]) for k in _SUBMODULE_KEYS} for s in subs]
        if "cmake_minimum" in dep:
            floor = _str(dep["cmake_minimum"])
            if not re.fullmatch(r"\d+(\.\d+){0,3}", floor):
                raise _Bad(f"dependency {entry['name']}: cmake_minimum {floor!r} is not a version")
            entry["cmake_minimum"] = floor
        out.append(entry)
    return out


def _kind(value: Any) -> str:
    s = _str(value)
    if s not in SOURCE_KINDS:
        raise _Bad(f"source kind {s!r} is not one of {', '.join(SOURCE_KINDS)}")
    return s


def _pkg_torch(value: Any) -> str:
    return "" if _str(value) == "" else _spec(value)


_Check = Callable[[Any], Any]

_TOP_CHECKS: dict[str, _Check] = {
    "description": _str,
    "arch": _arch_list,
    "python": _python_list,
    "cuda.version": _toolkit,
    "cuda.method": _method,
    "cuda.gcc_max": _gcc,
    "cuda.mirror": _url,
    "cuda.runfile": _runfile,
    "cuda.sha256": _sha256,
    "cuda.url": _url_or_empty,
    "cuda.pip_packages": _str_list,
    "cuda.apt_packages": _str_list,
    "torch.version": _version,
    "torch.index": _index,
    "torch.cuda": _torch_cuda,
    "stack.build": _str_list,
}
_PKG_CHECKS: dict[str, _Check] = {
    "version": _version,
    "patches": _patches,
    "torch": _pkg_torch,
    "needs_cuda_torch": _bool,
    "dependencies": _dependencies,
    "source.kind": _kind,
    **{f"source.{k}": _source_value for k in _SOURCE_KEYS - {"kind"}},
    "source.sha256": _sha256,
}


def normalize_arch(arch: object) -> str:
    """``12.0``, ``120``, ``sm_120``, ``sm_120a``, ``compute_120`` -> ``"12.0"``; ValueError else."""
    return Arch.parse(arch).cc_text


def _arch_admitted(arch: str, entries: Iterable[str]) -> bool:
    return any(normalize_arch(e) == arch for e in entries)


# --------------------------------------------------------------------------- cross checks


def _cuda_problems(version: str, method: str, gcc_max: int, runfile: str) -> dict[str, str]:
    """Field -> problem for one toolkit's settings; shared by load and override checks."""
    out: dict[str, str] = {}
    ceiling = drv.gcc_max(version)
    if gcc_max > ceiling:
        out["gcc_max"] = f"{gcc_max} is above nvcc {version}'s own ceiling, GCC {ceiling}"
    if method == "pip" and drv.cuda_major(version) < 13:
        out["method"] = f"CUDA {version} has no pip route (the cu12 nvcc wheel ships no nvcc)"
    if method == "runfile":
        if not runfile:
            out["runfile"] = (
                f"no runfile name known for CUDA {version}: set runfile (recipe.cuda.runfile)"
            )
        else:
            m = _RUNFILE_RE.match(runfile)
            if m and Version(m.group(1)) != Version(version):
                out["runfile"] = f"{runfile} is not a CUDA {version} runfile"
    return out


def _torch_problem(torch_cuda: str, index: str, toolkits: Iterable[str]) -> str | None:
    m = _INDEX_CUDA_RE.search(index)
    if m:
        from_index = "cpu" if m.group(1) == "cpu" else _cu_tag(m.group(2))
        if from_index != torch_cuda:
            return f"torch.cuda {torch_cuda!r} disagrees with index {index} ({from_index})"
    if torch_cuda == "cpu":
        return None
    for toolkit in toolkits:
        if drv.cuda_major(torch_cuda) != drv.cuda_major(toolkit):
            return (
                f"torch built for CUDA {torch_cuda} cannot take nvcc {toolkit}: "
                "cpp_extension refuses a different CUDA major"
            )
    return None


def _cu_tag(digits: str) -> str:
    try:
        return drv.CudaVersion.from_cu(digits).xy
    except ValueError:
        return digits  # "cu9": no CUDA release; the torch checks then name the mismatch


def spec_text(spec: SpecifierSet) -> str:
    """A specifier set with its lower bounds first (``>=580.65.06,<590``), for messages."""
    return ",".join(sorted((str(s) for s in spec), key=lambda s: (s[0] == "<", s)))


def _bounds(spec: SpecifierSet) -> set[Version]:
    """Versions where membership in `spec` can change."""
    out: set[Version] = set()
    for s in spec:
        wildcard = s.version.endswith(".*")
        try:
            v = Version(s.version.removesuffix(".*"))
        except InvalidVersion:
            continue
        out.add(v)
        if wildcard or s.operator == "~=":
            release = list(v.release) if wildcard else list(v.release[:-1])
            release[-1] += 1
            out.add(Version(".".join(map(str, release))))
    return out


def _probes(specs: Iterable[SpecifierSet | None]) -> list[Version]:
    """Driver versions on, just below and just above every bound of `specs`.

    Membership in every spec is constant between neighbouring probes, so checking the probes
    checks every driver version.
    """
    points = {Version("0"), Version("999999")}
    for spec in specs:
        if spec is None:
            continue
        for b in _bounds(spec):
            points.add(b)
            points.add(Version(".".join(map(str, [*b.release, 0, 0, 1]))))
            release = list(b.release)
            while release and release[-1] == 0:
                release.pop()
            if release:
                release[-1] -= 1
                points.add(Version(".".join(map(str, [*release, 999999]))))
    return sorted(points)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _torch_admits(spec: SpecifierSet | None, torch_version: str) -> bool:
    if spec is None:
        return True
    try:
        version = Version(torch_version)
    except InvalidVersion:
        return False
    return spec.contains(version.public, prereleases=True)
