"""Loading `recipes/*.toml`: parse, validate every key and value, and cross-check the
recipes, raising one `RecipeError` naming file, line and key."""

from __future__ import annotations

import copy
import difflib
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from .. import drivers as drv
from ..errors import RecipeError
from ..packages import registry
from ..stack.lock import Lock, StackSpec, load_stack, locks_root, parse_stack, stack_locks
from .checks import (
    _BUILD_KEYS,
    _CHOICE_OPTIONAL,
    _CHOICE_REQUIRED,
    _CUDA_OPTIONAL,
    _CUDA_REQUIRED,
    _PER_VERSION,
    _PKG_OPTIONAL,
    _PKG_REQUIRED,
    _SMOKE_KEYS,
    _TOP_OPTIONAL,
    _TOP_REQUIRED,
    _TORCH_KEYS,
    SOURCE_KINDS,
    _arch_list,
    _Bad,
    _bool,
    _Check,
    _cuda_problems,
    _dependencies,
    _display,
    _driver_spec,
    _gcc,
    _index,
    _kind,
    _knob,
    _method,
    _nonempty,
    _patches,
    _probes,
    _python_list,
    _runfile,
    _sha256,
    _source_value,
    _spec,
    _str,
    _str_list,
    _toolkit,
    _torch_admits,
    _torch_cuda,
    _torch_problem,
    _url,
    _version,
    spec_text,
)
from .model import CudaChoice, CudaSpec, PackageSpec, Recipe, TorchSpec
from .shared import SHARED_DIR, SharedTables, package_key

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# --------------------------------------------------------------------------- loading


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
    not_set, no_full_build = (
        _parse_build(f, table["build"], (*key, "build")) if "build" in table else ({}, "")
    )
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
        not_set=not_set,
        no_full_build=no_full_build,
        dependencies=(
            f.get(table, (*key, "dependencies"), _dependencies) if "dependencies" in table else []
        ),
    )


class _Shared:
    """The shared tables of a load (`recipe_shared`) with their package entries, each checked
    with the recipe schema (errors naming the shared file and line): all of them when the
    directory has its own tables, else (this checkout's tables) those a recipe uses."""

    def __init__(self, folder: Path, patches_dir: Path) -> None:
        self.tables = SharedTables.read(folder)
        self.patches_dir = patches_dir
        self.packages_file = _File(self.tables.packages.path, self.tables.packages.text)
        self.stacks_file = _File(self.tables.stacks.path, self.tables.stacks.text)
        self.raw: dict[str, tuple[int, Any]] = {}
        for i, table in enumerate(self.tables.package_tables()):
            if not isinstance(table, dict):
                raise self.packages_file.error((f"packages[{i}]",), "expected a table")
            key = package_key(str(table.get("name")), str(table.get("version")))
            if key in self.raw:
                raise self.packages_file.error(
                    (f"packages[{i}]", "version"), f"{key} is listed twice: one entry per pin"
                )
            self.raw[key] = (i, table)
        self.parsed: dict[str, PackageSpec] = {}
        if self.tables.packages.path.parent == folder / SHARED_DIR:
            for key in self.raw:
                self.package(key)

    def package(self, key: str) -> PackageSpec | None:
        """The entry `key` (``name==version``), parsed once; None when there is none."""
        if key not in self.raw:
            return None
        if key not in self.parsed:
            i, table = self.raw[key]
            self.parsed[key] = _parse_package(self.packages_file, table, i, self.patches_dir)
        return self.parsed[key]


def _package_entry(f: _File, table: Any, i: int, patches_dir: Path, shared: _Shared) -> PackageSpec:
    """A recipe's ``[[packages]]`` entry: its own, or ``use = "name==version"`` of the shared
    table, taken whole (a copy: recipes never share mutable values)."""
    if not isinstance(table, dict) or "use" not in table:
        return _parse_package(f, table, i, patches_dir)
    key = (f"packages[{i}]",)
    ref = table["use"]
    others = sorted(k for k in table if k != "use")
    if others:
        raise f.error(
            (*key, others[0]),
            f"an entry with 'use' is the shared entry whole; set {others[0]!r} in "
            f"{shared.packages_file.where}, or write the entry out here instead of 'use'",
        )
    found = shared.package(ref) if isinstance(ref, str) else None
    if found is None:
        known = ", ".join(shared.raw) or "nothing"
        hint = difflib.get_close_matches(str(ref), list(shared.raw), n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise f.error(
            (*key, "use"),
            f"{ref!r} is not an entry of {shared.packages_file.where}{extra}; it has: {known}",
        )
    return copy.deepcopy(found)


def _stack_table(f: _File, data: dict[str, Any], shared: _Shared) -> tuple[Any, Any]:
    """The recipe's ``[stack]`` with ``use = "<name>"`` resolved: the shared stack's keys, then
    the recipe's own; and the error function naming whichever file a key came from."""
    table = data["stack"]
    if not isinstance(table, dict) or "use" not in table:
        return table, f.error
    name = table["use"]
    found = shared.tables.stack_table(name) if isinstance(name, str) else None
    if not isinstance(found, dict):
        known = ", ".join(shared.tables.stack_names()) or "nothing"
        problem = f"{name!r} is not a stack of {shared.stacks_file.where}; it has: {known}"
        if found is not None:
            problem = f"{name!r} in {shared.stacks_file.where} is not a table of [stack] keys"
        raise f.error(("stack", "use"), problem)
    own = {k: v for k, v in table.items() if k != "use"}
    # The line's torch is the recipe's [torch] unless it has its own (`_stack_torch`).
    merged = {**{k: v for k, v in found.items() if k != "torch"}, **own}

    def error(keypath: Any, problem: str) -> RecipeError:
        parts = tuple(keypath)
        if len(parts) > 1 and parts[0] == "stack" and parts[1] not in own and parts[1] in found:
            return shared.stacks_file.error(
                ("stacks", name, *parts[1:]), f"{problem} (stack of {f.where})"
            )
        return f.error(parts, problem)

    return merged, error


def _parse_torch(f: _File, table: Any, key: tuple[str, ...]) -> TorchSpec:
    """A ``[torch]`` table (a recipe's, or a shared stack's ``torch``) at `key` of file `f`."""
    f.table(table, key, _TORCH_KEYS, set())
    return TorchSpec(
        version=f.get(table, (*key, "version"), _version),
        index=f.get(table, (*key, "index"), _index),
        cuda=f.get(table, (*key, "cuda"), _torch_cuda),
    )


def _stack_torch(
    f: _File, data: dict[str, Any], shared: _Shared
) -> tuple[TorchSpec, str, Any] | None:
    """The ``torch`` of the shared stack the recipe's ``[stack]`` uses, if it has one: the
    torch, where `plan` says it came from, and an error function naming the shared line (a
    recipe's keypath ``torch.x`` becomes ``stacks.<name>.torch.x`` of stacks.toml)."""
    table = data.get("stack")
    name = table.get("use") if isinstance(table, dict) else None
    if not isinstance(name, str):
        return None
    found = shared.tables.stack_table(name)
    if not isinstance(found, dict) or "torch" not in found:
        return None
    sf = shared.stacks_file

    def error(keypath: Any, problem: str) -> RecipeError:
        return sf.error(("stacks", name, *tuple(keypath)), f"{problem} (stack of {f.where})")

    torch = _parse_torch(sf, found["torch"], ("stacks", name, "torch"))
    return torch, f"{sf.where} (stack {name})", error


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


def _parse_build(f: _File, value: Any, key: tuple[str, ...]) -> tuple[dict[str, str], str]:
    """``[packages.build]``: ``not_set = { OPTION = "why" }``, ``no_full_build = "why"``."""
    f.table(value, key, set(), _BUILD_KEYS)
    table = value.get("not_set", {})
    if not isinstance(table, dict):
        raise f.error((*key, "not_set"), 'expected a table like { SOME_OPTION = "why" }')
    out: dict[str, str] = {}
    for option in table:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", option):
            raise f.error((*key, "not_set", option), "not a CMake variable name")
        out[option] = f.get(table, (*key, "not_set", option), _nonempty)
    refused = f.get(value, (*key, "no_full_build"), _nonempty) if "no_full_build" in value else ""
    return out, refused


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


def _parse_recipe(path: Path, patches_dir: Path, shared: _Shared) -> Recipe:
    text = path.read_text(encoding="utf-8")
    f = _File(path, text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(f"{f.where}: invalid TOML: {e}") from None
    recipe = _recipe_from(f, path, data, patches_dir, shared)
    offered = recipe.stack.engines if recipe.stack is not None else {}
    for engine, line in offered.items():
        # The engine's line replaces the [stack] and the [torch] whole: its torch, lock and
        # the packages derived from the lock are its own, checked as any recipe's.
        variant = {k: v for k, v in data.items() if k not in ("stack", "torch")}
        variant["stack"] = {"use": line}
        recipe.variants[engine] = _recipe_from(f, path, variant, patches_dir, shared)
    return recipe


def _recipe_from(
    f: _File, path: Path, data: dict[str, Any], patches_dir: Path, shared: _Shared
) -> Recipe:
    f.table(data, (), _TOP_REQUIRED, _TOP_OPTIONAL)
    name = f.get(data, ("name",), _nonempty)
    if name != path.stem:
        raise f.error(("name",), f"{name!r} must equal the file name stem {path.stem!r}")
    drivers = SpecifierSet(f.get(data, ("drivers",), _driver_spec))
    cuda = _parse_cuda(f, data["cuda"])
    stack_torch = _stack_torch(f, data, shared)
    if "torch" in data:
        torch = _parse_torch(f, data["torch"], ("torch",))
        torch_error, torch_from = f.error, ""
    elif stack_torch is not None:
        torch, torch_from, torch_error = stack_torch
    else:
        if "stack" in data:
            _stack_table(f, data, shared)  # a `use` of no stack is named as such first
        raise f.error(
            (),
            "missing [torch]: a recipe whose [stack] does not use a shared stack with a torch "
            f"({shared.stacks_file.where}) needs its own [torch] (version, index, cuda)",
        )
    problem = _torch_problem(torch.cuda, torch.index, [c.version for c in cuda.all()])
    if problem:
        raise torch_error(("torch", "cuda"), problem)
    raw_packages = data.get("packages", [])
    if not isinstance(raw_packages, list):
        raise f.error(("packages",), "expected an array of tables ([[packages]])")
    packages = [_package_entry(f, p, i, patches_dir, shared) for i, p in enumerate(raw_packages)]
    _check_package_entries(f, packages, torch.version)
    _check_coverage(f, drivers, cuda)
    pythons = f.get(data, ("python",), _python_list)  # checked before the locks use it
    stack, lock, locks = _parse_stack(f, data, packages, patches_dir, shared)
    packages += derive_stack_packages(packages, lock, shared, torch.version)
    if stack is not None and lock is not None and lock.torch:
        # The shared line's torch must agree with its lock even where a recipe's own [torch]
        # wins, unless the recipe's [stack] points at other locks than the line's.
        if stack_torch is not None and "locks" not in data["stack"]:
            _check_torch_is_the_locks(stack_torch[2], stack_torch[0], lock, stack.lock)
        _check_torch_is_the_locks(torch_error, torch, lock, stack.lock)
    return Recipe(
        name=name,
        path=path,
        description=f.get(data, ("description",), _str),
        drivers=drivers,
        arch=f.get(data, ("arch",), _arch_list),
        python=pythons[0],
        pythons=tuple(pythons),
        cuda=cuda,
        torch=torch,
        torch_from=torch_from,
        packages=packages,
        raw=data,
        patches_dir=patches_dir,
        stack=stack,
        lock=lock,
        locks=locks,
    )


def _parse_stack(
    f: _File,
    data: dict[str, Any],
    packages: list[PackageSpec],
    patches_dir: Path,
    shared: _Shared,
) -> tuple[StackSpec | None, Lock | None, dict[str, Lock]]:
    """``[stack]`` (or the shared stack it uses), the lock of the recipe's first Python that
    has one, and every Python's lock (sm120kit/stack/lock.py holds the schema and checks)."""
    if "stack" not in data:
        return None, None, {}
    table, error = _stack_table(f, data, shared)
    stack = parse_stack(table, error)
    torch_specs = {f"{canonicalize_name(p.name)}=={p.version}": p.torch for p in packages}
    specs = {k: v for k, v in torch_specs.items() if v is not None}
    root = locks_root(patches_dir.parent)
    stack, lock = load_stack(stack, root, specs, error, data.get("python"))
    return stack, lock, stack_locks(stack, root)


def derive_stack_packages(
    packages: list[PackageSpec], lock: Lock | None, shared: _Shared, torch_version: str
) -> list[PackageSpec]:
    """The stack's kernel packages a recipe does not name: for each distribution of `lock` that
    a building descriptor publishes (under any of its names, `registry.find`) and that has no
    recipe entry admitting the recipe's torch, the shared entry of the locked version
    (recipes/shared/packages.toml ``<name>==<version>``), so `build --package <name>` builds
    the stack's own release from source on every recipe of that stack. None is derived for a
    version without a shared entry: `ProvisionState.run_packages` then names the one to add."""
    if lock is None:
        return []
    out: list[PackageSpec] = []
    for entry in lock.packages:
        desc = registry.find(entry.name)
        if desc is None or not desc.builds or not entry.compiled:
            continue
        named = [p for p in (*packages, *out) if p.name == desc.name]
        if any(_torch_admits(p.torch, torch_version) for p in named):
            continue
        pin = shared.package(package_key(desc.name, entry.version))
        if pin is None or not _torch_admits(pin.torch, torch_version):
            continue
        derived = copy.deepcopy(pin)
        derived.derived = (
            f"{shared.packages_file.where} {desc.name}=={entry.version}, the release "
            f"{_display(lock.path.parent)} locks ({entry.name} {entry.version})"
        )
        out.append(derived)
    return out


def stack_package_hint(recipe: Recipe, name: str) -> str:
    """Why recipe `recipe` has no package `name` although its stack locks a release of it
    (no shared entry for that version to build it from), or ""."""
    desc = registry.find(name)
    if recipe.lock is None or desc is None:
        return ""
    for pub in registry.published_names(desc):
        entry = recipe.lock.entry(pub)
        if entry is not None:
            return (
                f"; its stack locks {entry.name} {entry.version}: to build that release from "
                f"source, add {package_key(desc.name, entry.version)} (its source) to "
                f"recipes/{SHARED_DIR}/packages.toml"
            )
    return ""


def _check_torch_is_the_locks(error: Any, torch: TorchSpec, lock: Lock, name: str) -> None:
    """One torch per recipe: [torch] is the serving stack's, that of `lock` (`recipe.lock`,
    the lock for the recipe's preferred Python, named `name`): every build is against it."""
    if Version(torch.version).public != Version(lock.torch).public:
        raise error(
            ("torch", "version"),
            f"{torch.version!r} differs from {name}'s torch {lock.torch}: a recipe has one "
            "torch, its lock's",
        )
    if torch.cuda != lock.torch_cuda:
        raise error(
            ("torch", "cuda"),
            f"{torch.cuda!r} differs from {name}'s torch_cuda {lock.torch_cuda}: a recipe has "
            "one torch, its lock's",
        )


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
    beside = Path(__file__).resolve().parents[2] / "recipes"
    return beside if beside.is_dir() else Path.cwd() / "recipes"


def load_recipes(
    directory: Path | str | None = None, *, patches_dir: Path | str | None = None
) -> dict[str, Recipe]:
    """Load and validate every ``*.toml`` in `directory` (default: `default_recipes_dir`), with
    the package pins and stacks they share (`recipe_shared`: ``<directory>/shared/``).

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
    shared = _Shared(folder, pdir)
    recipes = {}
    for path in files:
        recipe = _parse_recipe(path, pdir, shared)
        recipes[recipe.name] = recipe
    _check_overlaps(recipes)
    return recipes
