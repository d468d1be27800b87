"""Recipes: which toolkit, torch and kernel packages a host gets, chosen by its driver.

One TOML file per NVIDIA driver branch lives in the repo's ``recipes/`` directory
(``r570.toml`` ... ``r595.toml``); each file's header comment documents the schema. In short::

    name = "r580"                      # must equal the file stem
    description = "..."
    drivers = ">=580.65.06,<590"       # SpecifierSet on the driver version; no two recipes overlap
    arch = ["12.0"]                    # target compute capabilities
    python = "3.11"                    # X.Y of the build venv's interpreter
    [cuda]                             # the branch's default toolkit
    version = "13.0.2"; method = "pip" # runfile | pip | apt
    gcc_max = 15                       # host-compiler ceiling, <= nvcc's own
    mirror = "https://..."; runfile = "..."; sha256 = ""; pip_packages = [...]   # optional
    [[cuda.choices]]                   # first whose `drivers` admits the exact driver wins
    drivers = "<580.82.07"; version = "13.0.0"; method = "runfile"; runfile = "..."
    [torch]
    version = "2.9.1"; index = "https://download.pytorch.org/whl/cu130"; cuda = "13.0"  # or "cpu"
    [[packages]]
    name = "mypkg"; version = "2.8.3"; source = { kind = "pypi" }
    patches = []; knobs = {}; torch = "<2.14"; needs_cuda_torch = true

A choice inherits ``method`` and ``gcc_max`` from ``[cuda]``, and ``runfile``, ``sha256`` and
``pip_packages`` only when its version equals ``[cuda].version`` (they belong to one toolkit);
otherwise they come from `sm120kit.drivers` (runfile names docs/stack-facts.md section 1 knows, the CUDA 13 pip set).
``sha256 = ""`` means unknown: the download cannot be verified until an override supplies it
(`ResolvedRecipe.notes` says so). Package sources: ``{kind = "path", path}`` (relative to the
repo root), ``{kind = "git", url, ref, subdir}`` (``ref = ""``: not pinned yet, so the package
is listed in `ResolvedRecipe.problems`), ``{kind = "pypi", index, sha256}`` (``sha256`` pins the
sdist file; without it the index's listed hash is trusted). Patches are paths under the repo's
``patches/`` directory. A package may be listed once per torch range (``torch`` on every entry,
no two admitting one version): the torch in force, after ``recipe.torch.version`` overrides,
picks the entry (`Recipe.packages_for`), and ``recipe.packages.<name>.*`` overrides apply to
it. A package whose arch knob (from ``arch`` or the knob itself) holds a value
its build would silently drop (its descriptor's ``arch_value_problem``, `sm120kit.packages`)
is listed in `ResolvedRecipe.problems`.

Loading validates every file (unknown keys at any level, bad specifiers and versions, toolkits a
recipe's drivers cannot run, overlapping driver ranges, missing patch files) and raises one
`RecipeError` naming file, line where found, and key.

Selection (`select_recipe`): drivers below 570.26 are refused (too old for SM120); otherwise the
one recipe whose ``drivers`` admits the driver and whose ``arch`` holds the target arch serves
it, and inside it the first ``[[cuda.choices]]`` entry admitting the exact driver picks the
toolkit. ``--recipe NAME`` (``forced``) skips the range and arch match; the toolkit must
still be one the driver can run, and the driver may then be unknown (the default toolkit).

Target driver and arch (`resolve_for_host`), first found wins: the ``--driver``/``--arch``
flags, the host vars ``target_driver``/``target_arch`` (cross-building on a CPU-only box),
the gathered facts (``facts["gpu"]["driver_version"]``, ``facts["gpu"]["gpus"][i]["compute_cap"]``).

Overrides: ONE scheme, flat inventory vars named ``recipe.<key>`` where ``<key>`` is a key
of `ResolvedRecipe.values`, set in group_vars or host_vars like any var, so the inventory's
precedence decides per key and ``plan`` can name the file each value came from::

    recipe.torch.index: https://download.pytorch.org/whl/cpu   # CPU torch on a build box
    recipe.torch.version: 2.9.1                   # torch.cuda follows a /whl/cuXYZ|cpu index
    recipe.cuda.mirror: http://mirror.internal/cuda
    recipe.cuda.sha256: 0123...                   # pins the runfile download
    recipe.packages.mypkg.source.ref: 1a2b3c4
    recipe.packages.mypkg.knobs.MAX_JOBS: 2       # knobs may be added, not only changed

Overridable keys: ``description``, ``arch``, ``python``, ``cuda.{version, method, gcc_max,
mirror, runfile, sha256, url, pip_packages, apt_packages}``, ``torch.{version, index, cuda}``,
``packages.<name>.{version, patches, torch, needs_cuda_torch, dependencies}``,
``packages.<name>.source.{kind, path, url, ref, subdir, index}``, ``packages.<name>.knobs.<K>``,
``stack.build`` (the ``[stack]`` table and its lock: sm120kit/lock.py).
``name`` and ``drivers`` select a recipe and cannot be overridden (use ``--recipe``). Overriding
``cuda.version`` drops the recipe's runfile/sha256/pip_packages of the old version and derives
them anew. A nested ``recipe:`` dict is refused: dicts replace rather than merge across groups.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from . import drivers as drv
from . import knobs
from .errors import RecipeError
from .host import Host
from .lock import Lock, StackSpec, check_stack_lock, locks_root, parse_stack
from .packages import registry
from .packages.base import PackageDescriptor
from .remote.lib.arch import Arch

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

#: Prefix of the inventory vars that override recipe values.
OVERRIDE_PREFIX = "recipe."
#: Host vars that stand in for a GPU's driver and arch (cross-building).
TARGET_DRIVER_VAR = "target_driver"
TARGET_ARCH_VAR = "target_arch"

METHODS = ("runfile", "pip", "apt")
#: Source kind -> (required keys, optional keys) besides ``kind``.
SOURCE_KINDS: Mapping[str, tuple[frozenset[str], frozenset[str]]] = {
    "path": (frozenset({"path"}), frozenset()),
    "git": (frozenset({"url", "ref"}), frozenset({"subdir"})),
    "pypi": (frozenset(), frozenset({"index", "sha256"})),
}
_SOURCE_KEYS = frozenset({"kind", "path", "url", "ref", "subdir", "index", "sha256"})

_TOP_REQUIRED = {"name", "description", "drivers", "arch", "python", "cuda", "torch"}
_TOP_OPTIONAL = {"packages", "stack"}
_CUDA_REQUIRED = {"version", "method", "gcc_max"}
_CUDA_OPTIONAL = {"mirror", "runfile", "sha256", "pip_packages", "choices"}
_CHOICE_REQUIRED = {"drivers", "version"}
_CHOICE_OPTIONAL = {"method", "gcc_max", "runfile", "sha256", "pip_packages"}
_TORCH_KEYS = {"version", "index", "cuda"}
_PKG_REQUIRED = {"name", "version", "source"}
_PKG_OPTIONAL = {"patches", "knobs", "torch", "needs_cuda_torch", "smoke", "dependencies"}
#: ``[packages.smoke]``: what `smoke` should know about the package (not overridable).
_SMOKE_KEYS = {"not_for_arch"}
#: Choice fields that belong to one toolkit version only.
_PER_VERSION = ("runfile", "sha256", "pip_packages")

_RUNFILE_RE = re.compile(r"^cuda_(\d+\.\d+\.\d+)_[\d.]+_linux\.run$")
_INDEX_CUDA_RE = re.compile(r"/whl/(cpu|cu(\d+))/?$")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class CudaChoice:
    """The effective toolkit settings for one driver sub-range (or the ``[cuda]`` default).

    `origins` maps each field to the table that set it (``"cuda"``, ``"cuda.choices[1]"``)
    or ``"derived"`` (from `sm120kit.drivers`).
    """

    key: str
    drivers: SpecifierSet | None
    version: str
    method: str
    gcc_max: int
    runfile: str
    sha256: str
    pip_packages: tuple[str, ...]
    origins: Mapping[str, str]


@dataclass
class CudaSpec:
    """The ``[cuda]`` table: the branch default plus per-driver choices."""

    version: str
    method: str
    gcc_max: int
    mirror: str
    default: CudaChoice
    choices: list[CudaChoice] = field(default_factory=list)

    def choose(self, driver: Version | None) -> CudaChoice:
        """First choice whose ``drivers`` admits `driver`, else the default."""
        if driver is not None:
            for choice in self.choices:
                if choice.drivers is not None and choice.drivers.contains(driver):
                    return choice
        return self.default

    def all(self) -> list[CudaChoice]:
        return [self.default, *self.choices]


@dataclass
class TorchSpec:
    version: str
    index: str
    cuda: str  # the torch build's CUDA "X.Y", or "cpu"


@dataclass
class PackageSpec:
    name: str
    version: str
    source: dict[str, str]
    patches: list[str] = field(default_factory=list)
    knobs: dict[str, Any] = field(default_factory=dict)
    torch: SpecifierSet | None = None
    needs_cuda_torch: bool = True
    #: Extension modules that by design carry no code for the recipe's arch, with the reason
    #: (``smoke`` reports them as info instead of judging them); module name -> reason.
    not_for_arch: dict[str, str] = field(default_factory=dict)
    dependencies: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Recipe:
    """One validated recipe file."""

    name: str
    path: Path
    description: str
    drivers: SpecifierSet
    arch: list[str]
    python: str
    cuda: CudaSpec
    torch: TorchSpec
    packages: list[PackageSpec]
    raw: dict[str, Any]
    patches_dir: Path
    #: The serving stack (``[stack]``) and its lock, checked on load (sm120kit/lock.py).
    stack: StackSpec | None = None
    lock: Lock | None = None

    @property
    def source(self) -> str:
        """The file as error messages and `plan` name it."""
        return _display(self.path)

    def admits_driver(self, driver: object) -> bool:
        return self.drivers.contains(drv.parse_driver_version(driver))

    def admits_arch(self, arch: object) -> bool:
        return _arch_admitted(normalize_arch(arch), self.arch)

    def packages_for(self, torch_version: str) -> list[PackageSpec]:
        """One entry per package name, in recipe order: the entry whose ``torch`` admits
        `torch_version`. A name listed once is that entry whatever the torch (the build layer
        then names the mismatch as a problem); a name listed per torch range with none admitting
        the torch falls back to its first entry, and the same problem says why."""
        chosen: dict[str, PackageSpec] = {}
        for pkg in self.packages:
            current = chosen.get(pkg.name)
            if current is None or (
                not _torch_admits(current.torch, torch_version)
                and _torch_admits(pkg.torch, torch_version)
            ):
                chosen[pkg.name] = pkg
        return list(chosen.values())


@dataclass
class Selection:
    """Which recipe and toolkit serve a driver/arch, and why (one line)."""

    recipe: Recipe
    cuda: CudaChoice
    driver: str | None
    arch: str | None
    forced: bool
    reason: str

    @property
    def cuda_version(self) -> str:
        return self.cuda.version


@dataclass
class ResolvedRecipe:
    """A selected recipe with inventory overrides applied, as flat dotted keys.

    `values` maps keys like ``"cuda.version"`` or ``"packages.mypkg.knobs.MAX_JOBS"`` to
    values; `sources` maps the same keys to where each came from (``"recipes/r580.toml"``,
    ``"inventory/host_vars/gpu1.yaml (recipe.torch.index)"``, ``"--driver flag"``, ...).
    `problems` lists, per package, why it cannot be built with these values (the build layer
    refuses those packages); `notes` are warnings for `plan`.
    """

    recipe: Recipe
    selection: Selection
    values: dict[str, Any]
    sources: dict[str, str]
    problems: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: The recipe's package entries for the resolved torch (Recipe.packages_for); the recipe's
    #: whole list when empty.
    specs: list[PackageSpec] = field(default_factory=list)

    def rows(self) -> list[tuple[str, Any, str]]:
        """(key, value, source) for every value, sorted by key: what `plan` prints."""
        return [(k, self.values[k], self.sources.get(k, "")) for k in sorted(self.values)]

    def package_names(self) -> list[str]:
        return [p.name for p in self.package_specs()]

    def package_specs(self) -> list[PackageSpec]:
        """The package entries these values came from, one per name."""
        return self.specs or self.recipe.packages_for(str(self.values.get("torch.version", "")))

    def package(self, name: str) -> dict[str, Any]:
        """One package's values as a nested dict (``source`` and ``knobs`` as sub-dicts)."""
        prefix = f"packages.{name}."
        if name not in self.package_names():
            raise KeyError(name)
        out: dict[str, Any] = {"name": name, "source": {}, "knobs": {}}
        for key, value in self.values.items():
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix) :]
            head, _, tail = rest.partition(".")
            if head in ("source", "knobs") and tail:
                out[head][tail] = value
            else:
                out[rest] = value
        return out


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
_DEP_OPTIONAL = ("submodules",)
_SUBMODULE_KEYS = ("path", "url", "ref")
_DIR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _dependencies(value: Any) -> list[dict[str, Any]]:
    """``[{name, dir, url, ref, submodules?}]``: the build's own source dependencies
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
    "python": _python,
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
    return f"{digits[:-1]}.{digits[-1]}"


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


# --------------------------------------------------------------------------- loading


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


_HEADER_RE = re.compile(r"^\s*(\[\[?)\s*([^\[\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGN_RE = re.compile(r"^\s*\"?([A-Za-z0-9_.\-]+?)\"?\s*(=|\.)")


def _line_of(text: str, keypath: tuple[str, ...]) -> int | None:
    """Best-effort line of `keypath` (``("cuda", "choices[1]", "version")``) in TOML `text`."""
    counters: dict[str, int] = {}
    current = ""
    assigns: dict[tuple[str, str], int] = {}
    headers: dict[str, int] = {}
    for no, line in enumerate(text.splitlines(), 1):
        m = _HEADER_RE.match(line)
        if m:
            canon = ""
            parts = [p.strip().strip('"') for p in m.group(2).split(".")]
            for i, part in enumerate(parts):
                cand = f"{canon}.{part}" if canon else part
                if i == len(parts) - 1 and m.group(1) == "[[":
                    counters[cand] = counters.get(cand, -1) + 1
                    canon = f"{cand}[{counters[cand]}]"
                elif cand in counters:
                    canon = f"{cand}[{counters[cand]}]"
                else:
                    canon = cand
            current = canon
            headers.setdefault(current, no)
            continue
        m = _ASSIGN_RE.match(line)
        if m:
            assigns.setdefault((current, m.group(1).split(".")[0]), no)
    for i in range(len(keypath) - 1, -1, -1):
        table = ".".join(keypath[:i])
        hit = assigns.get((table, keypath[i])) or headers.get(".".join(keypath[: i + 1]))
        if hit:
            return hit
    return None


class _File:
    """One recipe file being read: turns (keypath, problem) into a located RecipeError."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.where = _display(path)
        self.text = text

    def error(self, keypath: Iterable[str], problem: str) -> RecipeError:
        parts = tuple(keypath)
        line = _line_of(self.text, parts) if parts else None
        loc = f"{self.where}:{line}" if line else self.where
        key = ".".join(parts)
        return RecipeError(f"{loc}: {key}: {problem}" if key else f"{loc}: {problem}")

    def table(
        self, value: Any, keypath: tuple[str, ...], required: set[str], optional: set[str]
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(keypath, f"expected a table, got {type(value).__name__}")
        for key in value:
            if key not in required | optional:
                hint = difflib.get_close_matches(key, sorted(required | optional), n=1)
                extra = f" (did you mean {hint[0]!r}?)" if hint else ""
                allowed = ", ".join(sorted(required | optional))
                raise self.error((*keypath, key), f"unknown key{extra}; allowed: {allowed}")
        for key in sorted(required):
            if key not in value:
                raise self.error(keypath or (key,), f"missing required key {key!r}")
        return value

    def get(self, table: dict[str, Any], keypath: tuple[str, ...], check: _Check) -> Any:
        try:
            return check(table[keypath[-1]])
        except _Bad as e:
            raise self.error(keypath, str(e)) from None


def _parse_choice(f: _File, table: Any, key: tuple[str, ...], base: dict[str, Any]) -> CudaChoice:
    """Build one effective toolkit choice; `base` holds the ``[cuda]`` values."""
    keystr = ".".join(key)
    if key == ("cuda",):
        drivers = None
        version = base["version"]
    else:
        f.table(table, key, _CHOICE_REQUIRED, _CHOICE_OPTIONAL)
        drivers = SpecifierSet(f.get(table, (*key, "drivers"), _driver_spec))
        version = f.get(table, (*key, "version"), _toolkit)
    origins: dict[str, str] = {"version": keystr if drivers is not None else "cuda"}
    vals: dict[str, Any] = {}
    checks: dict[str, _Check] = {
        "method": _method,
        "gcc_max": _gcc,
        "runfile": _runfile,
        "sha256": _sha256,
        "pip_packages": _str_list,
    }
    for name, check in checks.items():
        if drivers is not None and name in table:
            vals[name] = f.get(table, (*key, name), check)
            origins[name] = keystr
        elif name in base and (name not in _PER_VERSION or version == base["version"]):
            vals[name] = base[name]
            origins[name] = "cuda"
    method = vals["method"]
    if "runfile" not in vals:
        vals["runfile"] = (drv.runfile_name(version) or "") if method == "runfile" else ""
        origins["runfile"] = "derived"
    if "sha256" not in vals:
        vals["sha256"], origins["sha256"] = "", "derived"
    if "pip_packages" not in vals:
        pip = drv.pip_packages(version) if method == "pip" and drv.cuda_major(version) >= 13 else []
        vals["pip_packages"], origins["pip_packages"] = pip, "derived"
    for name, problem in _cuda_problems(version, method, vals["gcc_max"], vals["runfile"]).items():
        where = origins.get(name, keystr)
        at = where if where != "derived" else keystr
        raise f.error((*at.split("."), name if where != "derived" else "version"), problem)
    return CudaChoice(
        key=keystr,
        drivers=drivers,
        version=version,
        method=method,
        gcc_max=vals["gcc_max"],
        runfile=vals["runfile"],
        sha256=vals["sha256"],
        pip_packages=tuple(vals["pip_packages"]),
        origins=origins,
    )


def _parse_cuda(f: _File, table: Any) -> CudaSpec:
    f.table(table, ("cuda",), _CUDA_REQUIRED, _CUDA_OPTIONAL)
    base: dict[str, Any] = {
        "version": f.get(table, ("cuda", "version"), _toolkit),
        "method": f.get(table, ("cuda", "method"), _method),
        "gcc_max": f.get(table, ("cuda", "gcc_max"), _gcc),
    }
    mirror = f.get(table, ("cuda", "mirror"), _url) if "mirror" in table else drv.DEFAULT_MIRROR
    for name, check in (("runfile", _runfile), ("sha256", _sha256), ("pip_packages", _str_list)):
        if name in table:
            base[name] = f.get(table, ("cuda", name), check)
    default = _parse_choice(f, table, ("cuda",), base)
    raw_choices = table.get("choices", [])
    if not isinstance(raw_choices, list):
        raise f.error(("cuda", "choices"), "expected an array of tables ([[cuda.choices]])")
    choices = [
        _parse_choice(f, c, ("cuda", f"choices[{i}]"), base) for i, c in enumerate(raw_choices)
    ]
    return CudaSpec(
        version=base["version"],
        method=base["method"],
        gcc_max=base["gcc_max"],
        mirror=mirror,
        default=default,
        choices=choices,
    )


def _parse_source(f: _File, value: Any, key: tuple[str, ...]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise f.error(key, 'expected a table like { kind = "git", url = ..., ref = ... }')
    kind = f.get(value, (*key, "kind"), _kind) if "kind" in value else None
    if kind is None:
        raise f.error(key, f"missing required key 'kind' ({', '.join(SOURCE_KINDS)})")
    required, optional = SOURCE_KINDS[kind]
    f.table(value, key, set(required) | {"kind"}, set(optional))
    return {k: f.get(value, (*key, k), _sha256 if k == "sha256" else _source_value) for k in value}


def _parse_package(f: _File, table: Any, i: int, patches_dir: Path) -> PackageSpec:
    key = (f"packages[{i}]",)
    f.table(table, key, _PKG_REQUIRED, _PKG_OPTIONAL)
    name = f.get(table, (*key, "name"), _nonempty)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise f.error((*key, "name"), f"{name!r} is not a package name")
    knobs = table.get("knobs", {})
    if not isinstance(knobs, dict):
        raise f.error((*key, "knobs"), "expected a table of knob = value")
    checked_knobs = {k: f.get(knobs, (*key, "knobs", k), _knob) for k in knobs}
    patches = f.get(table, (*key, "patches"), _patches) if "patches" in table else []
    for p in patches:
        if not (patches_dir / p).is_file():
            raise f.error((*key, "patches"), f"patch file {patches_dir / p} does not exist")
    torch = f.get(table, (*key, "torch"), _spec) if "torch" in table else None
    not_for_arch = _parse_smoke(f, table["smoke"], (*key, "smoke")) if "smoke" in table else {}
    return PackageSpec(
        name=name,
        version=f.get(table, (*key, "version"), _version),
        source=_parse_source(f, table["source"], (*key, "source")),
        patches=patches,
        knobs=checked_knobs,
        torch=SpecifierSet(torch) if torch else None,
        needs_cuda_torch=(
            f.get(table, (*key, "needs_cuda_torch"), _bool) if "needs_cuda_torch" in table else True
        ),
        not_for_arch=not_for_arch,
        dependencies=(
            f.get(table, (*key, "dependencies"), _dependencies) if "dependencies" in table else []
        ),
    )


def _parse_smoke(f: _File, value: Any, key: tuple[str, ...]) -> dict[str, str]:
    """``[packages.smoke]``: ``not_for_arch = { module = "reason", ... }``."""
    f.table(value, key, set(), _SMOKE_KEYS)
    table = value.get("not_for_arch", {})
    if not isinstance(table, dict):
        raise f.error((*key, "not_for_arch"), 'expected a table like { flash_ops = "why" }')
    out: dict[str, str] = {}
    for module in table:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", module):
            raise f.error((*key, "not_for_arch", module), "not an extension module name")
        out[module] = f.get(table, (*key, "not_for_arch", module), _nonempty)
    return out


def _check_coverage(f: _File, drivers: SpecifierSet, cuda: CudaSpec) -> None:
    """Every SM120-capable driver the range admits must get a toolkit it can run."""
    floor = drv.parse_driver_version(drv.SM120_MIN_DRIVER)
    for probe in _probes([drivers, *(c.drivers for c in cuda.choices)]):
        if probe < floor or not drivers.contains(probe):
            continue
        choice = cuda.choose(probe)
        need = drv.parse_driver_version(drv.min_driver(choice.version))
        if probe < need:
            keypath = (*choice.key.split("."), "version")
            raise f.error(
                keypath,
                f"CUDA {choice.version} needs driver >= {drv.min_driver(choice.version)} but "
                f"drivers '{spec_text(drivers)}' admits {drv.format_driver(probe)}: narrow the range or add a [[cuda.choices]] "
                "entry for those drivers",
            )


def _parse_recipe(path: Path, patches_dir: Path) -> Recipe:
    text = path.read_text(encoding="utf-8")
    f = _File(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{f.where}: invalid TOML: {e}") from None
    f.table(data, (), _TOP_REQUIRED, _TOP_OPTIONAL)
    name = f.get(data, ("name",), _nonempty)
    if name != path.stem:
        raise f.error(("name",), f"{name!r} must equal the file name stem {path.stem!r}")
    drivers = SpecifierSet(f.get(data, ("drivers",), _driver_spec))
    cuda = _parse_cuda(f, data["cuda"])
    f.table(data["torch"], ("torch",), _TORCH_KEYS, set())
    torch = TorchSpec(
        version=f.get(data["torch"], ("torch", "version"), _version),
        index=f.get(data["torch"], ("torch", "index"), _index),
        cuda=f.get(data["torch"], ("torch", "cuda"), _torch_cuda),
    )
    problem = _torch_problem(torch.cuda, torch.index, [c.version for c in cuda.all()])
    if problem:
        raise f.error(("torch", "cuda"), problem)
    raw_packages = data.get("packages", [])
    if not isinstance(raw_packages, list):
        raise f.error(("packages",), "expected an array of tables ([[packages]])")
    packages = [_parse_package(f, p, i, patches_dir) for i, p in enumerate(raw_packages)]
    _check_package_entries(f, packages, torch.version)
    _check_coverage(f, drivers, cuda)
    stack, lock = _parse_stack(f, data, packages, patches_dir)
    return Recipe(
        name=name,
        path=path,
        description=f.get(data, ("description",), _str),
        drivers=drivers,
        arch=f.get(data, ("arch",), _arch_list),
        python=f.get(data, ("python",), _python),
        cuda=cuda,
        torch=torch,
        packages=packages,
        raw=data,
        patches_dir=patches_dir,
        stack=stack,
        lock=lock,
    )


def _parse_stack(
    f: _File, data: dict[str, Any], packages: list[PackageSpec], patches_dir: Path
) -> tuple[StackSpec | None, Lock | None]:
    """``[stack]`` and the lock it names (sm120kit/lock.py holds the schema and checks)."""
    if "stack" not in data:
        return None, None
    stack = parse_stack(data["stack"], f.error)
    torch_specs = {f"{canonicalize_name(p.name)}=={p.version}": p.torch for p in packages}
    specs = {k: v for k, v in torch_specs.items() if v is not None}
    return stack, check_stack_lock(stack, locks_root(patches_dir.parent), specs, f.error)


def _torch_admits(spec: SpecifierSet | None, torch_version: str) -> bool:
    if spec is None:
        return True
    try:
        version = Version(torch_version)
    except InvalidVersion:
        return False
    return spec.contains(version.public, prereleases=True)


def _check_package_entries(f: _File, packages: list[PackageSpec], torch_version: str) -> None:
    """A name may be listed once, or once per torch range (each entry with a ``torch``
    specifier, no two admitting the same torch); the recipe's own torch must be admitted by
    the entry it selects."""
    by_name: dict[str, list[int]] = {}
    for i, pkg in enumerate(packages):
        by_name.setdefault(pkg.name, []).append(i)
    for name, idx in by_name.items():
        if len(idx) > 1:
            if any(packages[i].torch is None for i in idx):
                raise f.error(
                    (f"packages[{idx[1]}]", "name"),
                    f"package {name!r} listed twice: list it once, or once per torch range "
                    "with a 'torch' specifier on each entry",
                )
            for n, i in enumerate(idx):
                for j in idx[n + 1 :]:
                    a, b = packages[i].torch, packages[j].torch
                    assert a is not None and b is not None
                    for probe in _probes([a, b]):
                        if a.contains(probe, prereleases=True) and b.contains(
                            probe, prereleases=True
                        ):
                            raise f.error(
                                (f"packages[{j}]", "torch"),
                                f"{name}'s torch '{spec_text(b)}' overlaps packages[{i}]'s "
                                f"'{spec_text(a)}' (both admit torch {probe})",
                            )
        if not any(_torch_admits(packages[i].torch, torch_version) for i in idx):
            i = idx[0]
            spec = packages[i].torch
            assert spec is not None  # an entry without one admits every torch
            raise f.error(
                (f"packages[{i}]", "torch"),
                f"torch {torch_version} is outside {name}'s torch '{spec_text(spec)}'",
            )


def _check_overlaps(recipes: Mapping[str, Recipe]) -> None:
    items = sorted(recipes.values(), key=lambda r: r.name)
    for i, a in enumerate(items):
        for b in items[i + 1 :]:
            for probe in _probes([a.drivers, b.drivers]):
                if a.drivers.contains(probe) and b.drivers.contains(probe):
                    f = _File(b.path, b.path.read_text(encoding="utf-8"))
                    raise f.error(
                        ("drivers",),
                        f"'{spec_text(b.drivers)}' overlaps {a.source} drivers '{spec_text(a.drivers)}' "
                        f"(both admit driver {drv.format_driver(probe)})",
                    )


def default_recipes_dir() -> Path:
    """The repo's ``recipes/`` next to the package, else ``./recipes``."""
    beside = Path(__file__).resolve().parent.parent / "recipes"
    return beside if beside.is_dir() else Path.cwd() / "recipes"


def load_recipes(
    directory: Path | str | None = None, *, patches_dir: Path | str | None = None
) -> dict[str, Recipe]:
    """Load and validate every ``*.toml`` in `directory` (default: `default_recipes_dir`).

    `patches_dir` defaults to ``patches/`` beside `directory`. Raises RecipeError naming the
    file (and line, where found) and key of the first problem.
    """
    folder = Path(directory) if directory is not None else default_recipes_dir()
    if not folder.is_dir():
        raise RecipeError(f"{folder}: recipes directory not found")
    pdir = Path(patches_dir) if patches_dir is not None else folder.parent / "patches"
    files = sorted(folder.glob("*.toml"))
    if not files:
        raise RecipeError(f"{_display(folder)}: no *.toml recipes")
    recipes = {}
    for path in files:
        recipe = _parse_recipe(path, pdir)
        recipes[recipe.name] = recipe
    _check_overlaps(recipes)
    return recipes


# --------------------------------------------------------------------------- selection


def _describe_choice(choice: CudaChoice) -> str:
    if choice.drivers is None:
        return f"CUDA {choice.version} ([cuda] default)"
    return f"CUDA {choice.version} ({choice.key} drivers '{spec_text(choice.drivers)}')"


def select_recipe(
    recipes: Mapping[str, Recipe],
    *,
    driver: str | None,
    arch: str | None,
    forced: str | None = None,
) -> Selection:
    """Pick the recipe and toolkit for a target `driver` and `arch` (or the `forced` recipe).

    Raises RecipeError for a driver too old for SM120 (< 570.26), an unknown driver or arch
    (naming ``--driver``/``target_driver`` and ``--arch``/``target_arch``), no recipe for the
    driver or arch, or a forced recipe whose toolkit the driver cannot run.
    """
    if not recipes:
        raise RecipeError("no recipes loaded")
    dv: Version | None = None
    if driver is not None:
        try:
            dv = drv.parse_driver_version(driver)
        except ValueError as e:
            raise RecipeError(f"driver: {e}") from None
        if not drv.supports_sm120(dv):
            raise RecipeError(
                f"driver {driver} is too old for SM120 (compute capability 12.0): install an "
                f"R570 or newer driver, >= {drv.SM120_MIN_DRIVER}, with the open kernel modules"
            )
    norm_arch: str | None = None
    if arch is not None:
        try:
            norm_arch = normalize_arch(arch)
        except ValueError as e:
            raise RecipeError(f"arch: {e}") from None
    if forced is not None:
        return _select_forced(recipes, forced, driver, dv, norm_arch)
    if dv is None:
        raise RecipeError(
            "target driver unknown: pass --driver (and --arch), or set host vars "
            f"{TARGET_DRIVER_VAR} and {TARGET_ARCH_VAR} (cross-building on a box without a GPU)"
        )
    if norm_arch is None:
        raise RecipeError(
            f"target arch unknown: pass --arch (e.g. 12.0) or set host var {TARGET_ARCH_VAR}"
        )
    by_arch = [r for r in recipes.values() if _arch_admitted(norm_arch, r.arch)]
    if not by_arch:
        targeted = sorted({a for r in recipes.values() for a in r.arch})
        raise RecipeError(
            f"no recipe targets arch {norm_arch} (recipes target {', '.join(targeted)}); "
            "force one with --recipe NAME and override recipe.arch"
        )
    hits = [r for r in by_arch if r.drivers.contains(dv)]
    if not hits:
        ranges = "; ".join(
            f"{r.name} '{spec_text(r.drivers)}'" for r in sorted(by_arch, key=lambda r: r.name)
        )
        raise RecipeError(
            f"no recipe serves driver {driver} ({ranges}): force one with --recipe NAME"
        )
    if len(hits) > 1:  # load_recipes refuses overlaps; recipes built by hand may not
        raise RecipeError(
            f"driver {driver} is served by several recipes: {', '.join(r.name for r in hits)}"
        )
    recipe = hits[0]
    choice = recipe.cuda.choose(dv)
    reason = (
        f"driver {driver} is in {recipe.name}'s range '{spec_text(recipe.drivers)}' "
        f"-> {_describe_choice(choice)}, needs >= {drv.min_driver(choice.version)}"
    )
    return Selection(recipe, choice, driver, norm_arch, False, reason)


def _select_forced(
    recipes: Mapping[str, Recipe],
    forced: str,
    driver: str | None,
    dv: Version | None,
    arch: str | None,
) -> Selection:
    recipe = recipes.get(forced)
    if recipe is None:
        raise RecipeError(
            f"--recipe {forced}: no such recipe (known: {', '.join(sorted(recipes))})"
        )
    choice = recipe.cuda.choose(dv)
    need = drv.min_driver(choice.version)
    if dv is not None and dv < drv.parse_driver_version(need):
        raise RecipeError(
            f"--recipe {forced}: its CUDA {choice.version} needs driver >= {need}, "
            f"but the target driver is {driver}"
        )
    if dv is None:
        reason = f"forced by --recipe {forced}; driver unknown -> {_describe_choice(choice)}"
    else:
        inside = "in" if recipe.drivers.contains(dv) else "outside"
        reason = (
            f"forced by --recipe {forced} (driver {driver} is {inside} its range "
            f"'{spec_text(recipe.drivers)}') -> {_describe_choice(choice)}"
        )
    return Selection(recipe, choice, driver, arch, True, reason)


# --------------------------------------------------------------------------- resolution


_FACTS_DRIVER = "facts (driver_version)"
_FACTS_ARCH = "facts (nvidia-smi compute_cap)"


def _var_source(host: Host, var: str) -> str:
    return f"{host.var_sources.get(var, 'inventory')} ({var})"


def _facts_gpu(facts: Mapping[str, Any] | None) -> Mapping[str, Any]:
    gpu = (facts or {}).get("gpu")
    return gpu if isinstance(gpu, Mapping) else {}


def _target_driver(
    host: Host, facts: Mapping[str, Any] | None, flag: str | None
) -> tuple[str | None, str]:
    if flag is not None:
        return str(flag).strip(), "--driver flag"
    if host.vars.get(TARGET_DRIVER_VAR) not in (None, ""):
        value = host.vars[TARGET_DRIVER_VAR]
        src = _var_source(host, TARGET_DRIVER_VAR)
        if isinstance(value, float):
            raise RecipeError(f"{src}: write {value!r} quoted: YAML read it as a number")
        return str(value).strip(), src
    # The facts layer fills driver_version from /proc/driver/nvidia/version when nvidia-smi
    # fails, so a driver may be known while no GPU is listed (present False, arch unknown).
    found = _facts_gpu(facts).get("driver_version")
    if found:
        return str(found).strip(), _FACTS_DRIVER
    return None, ""


def _target_arch(
    host: Host, facts: Mapping[str, Any] | None, flag: str | None, recipes: Mapping[str, Recipe]
) -> tuple[str | None, str]:
    if flag is not None:
        return str(flag).strip(), "--arch flag"
    if host.vars.get(TARGET_ARCH_VAR) not in (None, ""):
        return str(host.vars[TARGET_ARCH_VAR]).strip(), _var_source(host, TARGET_ARCH_VAR)
    caps = _gpu_caps(facts)
    if not caps:
        return None, ""
    # A box mixing GPUs targets the first arch some recipe serves; plan notes the others.
    for cap in caps:
        if any(_arch_admitted(cap, r.arch) for r in recipes.values()):
            return cap, _FACTS_ARCH
    return caps[0], _FACTS_ARCH


def _gpu_caps(facts: Mapping[str, Any] | None) -> list[str]:
    gpu = _facts_gpu(facts)
    if gpu.get("present") is False:
        return []
    caps: list[str] = []
    for g in gpu.get("gpus") or []:
        cap = g.get("compute_cap") if isinstance(g, Mapping) else None
        if cap in (None, ""):
            continue
        try:
            norm = normalize_arch(cap)
        except ValueError:
            continue
        if norm not in caps:
            caps.append(norm)
    return caps


def _base_values(sel: Selection, specs: list[PackageSpec]) -> tuple[dict[str, Any], dict[str, str]]:
    """The selected recipe and choice as flat values with their sources; `specs` are the
    package entries for the torch in force (Recipe.packages_for)."""
    recipe, choice = sel.recipe, sel.cuda
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(key: str, value: Any, where: str = "") -> None:
        values[key] = value
        sources[key] = f"{recipe.source} ({where})" if where and where != "cuda" else recipe.source

    put("description", recipe.description)
    put("drivers", spec_text(recipe.drivers))
    put("arch", list(recipe.arch))
    put("python", recipe.python)
    put("cuda.version", choice.version, choice.origins["version"])
    put("cuda.mirror", recipe.cuda.mirror)
    for name in ("method", "gcc_max", "runfile", "sha256", "pip_packages"):
        origin = choice.origins.get(name, "derived")
        if origin == "derived":
            continue  # derived again after overrides, from the final cuda.version
        value = getattr(choice, name)
        put(f"cuda.{name}", list(value) if isinstance(value, tuple) else value, origin)
    put("torch.version", recipe.torch.version)
    put("torch.index", recipe.torch.index)
    put("torch.cuda", recipe.torch.cuda)
    for pkg in specs:
        where = f"packages[{next(i for i, p in enumerate(recipe.packages) if p is pkg)}]"
        base = f"packages.{pkg.name}."
        put(base + "version", pkg.version, where)
        for k, v in pkg.source.items():
            put(f"{base}source.{k}", v, where)
        put(base + "patches", list(pkg.patches), where)
        for k, v in pkg.knobs.items():
            put(f"{base}knobs.{k}", v, where)
        put(base + "torch", spec_text(pkg.torch) if pkg.torch is not None else "", where)
        put(base + "needs_cuda_torch", pkg.needs_cuda_torch, where)
        put(base + "dependencies", [dict(d) for d in pkg.dependencies], where)
    if recipe.stack is not None:
        for key in ("top", "lock", "reason", "build"):
            value = getattr(recipe.stack, key)
            put(f"stack.{key}", list(value) if isinstance(value, tuple) else value, "stack")
    return values, sources


def _override_check(key: str, packages: list[str]) -> _Check | None:
    if key in _TOP_CHECKS:
        return _TOP_CHECKS[key]
    for name in sorted(packages, key=len, reverse=True):
        prefix = f"packages.{name}."
        if key.startswith(prefix):
            rest = key[len(prefix) :]
            if rest.startswith("knobs.") and len(rest) > len("knobs."):
                return _knob
            return _PKG_CHECKS.get(rest)
    return None


def _overridable(packages: list[str]) -> list[str]:
    keys = list(_TOP_CHECKS)
    for name in packages:
        keys += [f"packages.{name}.{k}" for k in _PKG_CHECKS]
        keys.append(f"packages.{name}.knobs.<NAME>")
    return keys


def _collect_overrides(host: Host) -> dict[str, tuple[Any, str]]:
    nested = host.vars.get("recipe")
    if isinstance(nested, Mapping):
        raise RecipeError(
            f"{_var_source(host, 'recipe')}: write recipe overrides as flat vars such as "
            "'recipe.torch.version: ...' (a nested 'recipe' dict replaces rather than merges "
            "across groups)"
        )
    return {
        var[len(OVERRIDE_PREFIX) :]: (value, _var_source(host, var))
        for var, value in sorted(host.vars.items())
        if var.startswith(OVERRIDE_PREFIX)
    }


def _apply_overrides(
    values: dict[str, Any],
    sources: dict[str, str],
    overrides: Mapping[str, tuple[Any, str]],
    packages: list[str],
) -> set[str]:
    done: set[str] = set()
    for key, (value, source) in overrides.items():
        if key in ("name", "drivers"):
            raise RecipeError(
                f"{source}: recipe.{key} cannot be overridden: it selects the recipe "
                "(use --recipe NAME, --driver or target_driver)"
            )
        check = _override_check(key, packages)
        if check is None:
            hint = difflib.get_close_matches(key, _overridable(packages), n=1)
            extra = f" (did you mean recipe.{hint[0]}?)" if hint else ""
            raise RecipeError(f"{source}: recipe.{key} is not a recipe value{extra}")
        try:
            values[key] = check(value)
        except _Bad as e:
            raise RecipeError(f"{source}: recipe.{key}: {e}") from None
        sources[key] = source
        done.add(key)
    return done


def check_overrides(recipes: Mapping[str, Recipe], host: Host) -> None:
    """The ``recipe.*`` vars of `host`, checked before any host is touched: each must name a
    recipe value (of some recipe's package) and have that value's type. Which recipe the host
    gets is known only from its facts; a value that suits no recipe is refused now, with the
    same one-line RecipeError the run would give (`resolve_for_host` checks it again against
    the chosen recipe)."""
    packages = sorted({p.name for r in recipes.values() for p in r.packages})
    try:
        _apply_overrides({}, {}, _collect_overrides(host), packages)
    except RecipeError as e:
        raise RecipeError(f"host {host.name}: {e}") from None


def _derive(values: dict[str, Any], sources: dict[str, str], overridden: set[str]) -> None:
    """Fill values that follow from others: toolkit files and URLs, torch.cuda from its index."""
    version = values["cuda.version"]
    if "cuda.version" in overridden:
        for name in _PER_VERSION:
            key = f"cuda.{name}"
            if key not in overridden:
                values.pop(key, None)  # they belonged to the recipe's toolkit
        ceiling = drv.gcc_max(version)
        if "cuda.gcc_max" not in overridden and values["cuda.gcc_max"] > ceiling:
            values["cuda.gcc_max"] = ceiling
            sources["cuda.gcc_max"] = f"sm120kit/drivers.py (nvcc {version} ceiling)"
    table = f"sm120kit/drivers.py (CUDA {version})"
    if "cuda.runfile" not in values:
        values["cuda.runfile"] = drv.runfile_name(version) or ""
        sources["cuda.runfile"] = table if values["cuda.runfile"] else "unknown"
    if "cuda.sha256" not in values:
        values["cuda.sha256"], sources["cuda.sha256"] = "", "unknown"
    if "cuda.pip_packages" not in values:
        pip = drv.pip_packages(version) if drv.cuda_major(version) >= 13 else []
        values["cuda.pip_packages"], sources["cuda.pip_packages"] = pip, table
    if "cuda.apt_packages" not in values:
        values["cuda.apt_packages"] = drv.apt_packages(version)
        sources["cuda.apt_packages"] = table
    if "cuda.url" not in values:
        runfile = values["cuda.runfile"]
        values["cuda.url"] = (
            drv.runfile_url(version, runfile, values["cuda.mirror"]) if runfile else ""
        )
        sources["cuda.url"] = "derived from cuda.mirror, cuda.version, cuda.runfile"
    if "torch.index" in overridden and "torch.cuda" not in overridden:
        m = _INDEX_CUDA_RE.search(values["torch.index"])
        if m:
            values["torch.cuda"] = "cpu" if m.group(1) == "cpu" else _cu_tag(m.group(2))
            sources["torch.cuda"] = f"derived from torch.index ({sources['torch.index']})"


def _fail(values: Mapping[str, Any], sources: Mapping[str, str], key: str, problem: str) -> None:
    raise RecipeError(f"{key} = {values.get(key)!r} (from {sources.get(key, '?')}): {problem}")


def _check_resolved(
    resolved: ResolvedRecipe, driver: str | None, driver_src: str, arch: str | None
) -> None:
    values, sources = resolved.values, resolved.sources
    version = values["cuda.version"]
    need = drv.min_driver(version)
    if driver is not None and not drv.toolkit_can_run(version, driver):
        _fail(
            values,
            sources,
            "cuda.version",
            f"needs driver >= {need}, the target driver is {driver} (from {driver_src})",
        )
    for name, problem in _cuda_problems(
        version, values["cuda.method"], values["cuda.gcc_max"], values["cuda.runfile"]
    ).items():
        _fail(values, sources, f"cuda.{name}", problem)
    torch_problem = _torch_problem(values["torch.cuda"], values["torch.index"], [version])
    if torch_problem:
        where = f"torch.index from {sources['torch.index']}"
        _fail(values, sources, "torch.cuda", f"{torch_problem} ({where})")
    if arch is not None and not _arch_admitted(arch, values["arch"]):
        _fail(values, sources, "arch", f"does not include the target arch {arch}")
    if values["cuda.method"] == "runfile" and not values["cuda.sha256"]:
        resolved.notes.append(
            f"cuda.sha256 is unknown: {values['cuda.runfile']} will not be verified "
            "(set recipe.cuda.sha256)"
        )
    for name in resolved.package_names():
        _check_package(resolved, name)


def _check_package(resolved: ResolvedRecipe, name: str) -> None:
    values, sources = resolved.values, resolved.sources
    base = f"packages.{name}."
    kind = values[base + "source.kind"]
    required, optional = SOURCE_KINDS[kind]
    for k in required:
        if base + "source." + k not in values:
            _fail(values, sources, base + "source.kind", f"a {kind} source needs source.{k}")
    for k in _SOURCE_KEYS - required - optional - {"kind"}:
        values.pop(f"{base}source.{k}", None)  # left over from the recipe's other kind
        sources.pop(f"{base}source.{k}", None)
    patches_dir = resolved.recipe.patches_dir
    for p in values[base + "patches"]:
        if not (patches_dir / p).is_file():
            _fail(values, sources, base + "patches", f"patch file {patches_dir / p} does not exist")
    problems: list[str] = []
    spec = values[base + "torch"]
    torch_version = values["torch.version"]
    if spec and not SpecifierSet(spec).contains(torch_version, prereleases=True):
        problems.append(
            f"torch {torch_version} ({sources['torch.version']}) is outside its torch '{spec}'"
        )
    if values[base + "needs_cuda_torch"] and values["torch.cuda"] == "cpu":
        problems.append("a CPU torch cannot build CUDAExtension code (CUDA_HOME is None)")
    if kind == "git" and not values.get(base + "source.ref"):
        problems.append(f"source.ref is not pinned (set recipe.{base}source.ref)")
    problems += _arch_knob_problems(resolved, base, registry.descriptor(name))
    if problems:
        resolved.problems[name] = problems


def _arch_knob_problems(resolved: ResolvedRecipe, base: str, desc: PackageDescriptor) -> list[str]:
    """A package whose build silently drops arch values it does not know (its descriptor's
    `arch_value_problem`): refuse before any build, naming the value and where it came from."""
    if desc.arch_value_problem is None or desc.arch_value is None:
        return []
    values, sources = resolved.values, resolved.sources
    key = base + "knobs." + desc.arch_knob
    if key in values:
        value, where = str(values[key]), sources.get(key, "?")
        if desc.arch_knob not in where:
            where = f"{key} in {where}"
    else:
        try:
            value = desc.arch_value(knobs.parse_arch_list(values["arch"]))
        except RecipeError as exc:
            return [str(exc)]
        where = f"derived from arch {values['arch']} ({sources.get('arch', '?')})"
    problem = desc.arch_value_problem(values[base + "version"], value)
    return [f"{problem} ({where})"] if problem else []


def resolve_for_host(
    recipes: Mapping[str, Recipe],
    host: Host,
    facts: Mapping[str, Any] | None,
    *,
    driver: str | None = None,
    arch: str | None = None,
    forced: str | None = None,
) -> ResolvedRecipe:
    """Select the recipe for `host` and apply its ``recipe.*`` inventory overrides.

    `driver`/`arch`/`forced` are the ``--driver``/``--arch``/``--recipe`` flags. Raises
    RecipeError (prefixed with the host name) when no recipe fits or an override is invalid.
    """
    try:
        return _resolve(recipes, host, facts, driver, arch, forced)
    except RecipeError as e:
        raise RecipeError(f"host {host.name}: {e}") from None


def _resolve(
    recipes: Mapping[str, Recipe],
    host: Host,
    facts: Mapping[str, Any] | None,
    driver_flag: str | None,
    arch_flag: str | None,
    forced: str | None,
) -> ResolvedRecipe:
    overrides = _collect_overrides(host)  # refuse a malformed scheme before anything else
    driver, driver_src = _target_driver(host, facts, driver_flag)
    arch, arch_src = _target_arch(host, facts, arch_flag, recipes)
    if driver is None and forced is None:
        gpu = _facts_gpu(facts)
        seen = "facts not gathered" if facts is None else "no NVIDIA driver in its facts"
        if gpu.get("error"):
            seen += f": {gpu['error']}"
        raise RecipeError(
            f"target driver unknown ({seen}): pass --driver and --arch, or set host vars "
            f"{TARGET_DRIVER_VAR} and {TARGET_ARCH_VAR} to cross-build on a box without a GPU"
        )
    sel = select_recipe(recipes, driver=driver, arch=arch, forced=forced)
    # The torch in force picks each package's entry before any package value is overridden,
    # so recipe.packages.<name>.* applies to the entry that torch gets.
    torch_override = overrides.get("torch.version")
    torch_version = str(torch_override[0]) if torch_override else sel.recipe.torch.version
    specs = sel.recipe.packages_for(torch_version)
    values, sources = _base_values(sel, specs)
    packages = [p.name for p in specs]
    overridden = _apply_overrides(values, sources, overrides, packages)
    _derive(values, sources, overridden)
    values["recipe"] = sel.recipe.name
    sources["recipe"] = sel.reason
    if driver is not None:
        values["target.driver"], sources["target.driver"] = driver, driver_src
    if sel.arch is not None:
        values["target.arch"], sources["target.arch"] = sel.arch, arch_src
    resolved = ResolvedRecipe(sel.recipe, sel, values, sources, specs=specs)
    _check_resolved(resolved, driver, driver_src, sel.arch)
    gpu = _facts_gpu(facts)
    if driver_src == _FACTS_DRIVER and gpu.get("module") == "proprietary":
        resolved.notes.append(
            "the host runs NVIDIA's proprietary kernel modules: SM120 GPUs need the open ones"
        )
    installed = gpu.get("driver_version")
    if installed and driver is not None and driver_src != _FACTS_DRIVER:
        if str(installed).strip() != driver:
            resolved.notes.append(
                f"target driver {driver} ({driver_src}) differs from the installed {installed}"
            )
    for g in gpu.get("gpus") or []:
        cap = g.get("compute_cap") if isinstance(g, Mapping) else None
        try:
            norm = normalize_arch(cap) if cap else None
        except ValueError:
            norm = None
        if norm is not None and not _arch_admitted(norm, values["arch"]):
            resolved.notes.append(
                f"GPU {g.get('index')} ({g.get('name')}, {norm}) is not in arch "
                f"{values['arch']}: kernels built here will not run on it"
            )
    return resolved
