"""Recipes: which toolkit, torch and kernel packages a host gets, chosen by its driver.

One TOML file per NVIDIA driver branch lives in the repo's ``recipes/`` directory
(``r570.toml`` ... ``r595.toml``); each file's header comment documents the schema. In short::

    name = "r580"                      # must equal the file stem
    description = "..."
    drivers = ">=580.65.06,<590"       # SpecifierSet on the driver version; no two recipes overlap
    arch = ["12.0"]                    # target compute capabilities
    python = ["3.11", "3.12", "3.13"] # X.Y in order of preference (or one X.Y): per host the
                                       # first with a lock the host has (python_choice.py)
    [cuda]                             # the branch's default toolkit
    version = "13.0.2"; method = "pip" # runfile | pip | apt
    gcc_max = 15                       # host-compiler ceiling, <= nvcc's own
    mirror = "https://..."; runfile = "..."; sha256 = ""; pip_packages = [...]   # optional
    [[cuda.choices]]                   # first whose `drivers` admits the exact driver wins
    drivers = "<580.82.07"; version = "13.0.0"; method = "runfile"; runfile = "..."
    [torch]                            # optional with a shared [stack]: else its line's torch
    version = "2.9.1"; index = "https://download.pytorch.org/whl/cu130"; cuda = "13.0"  # or "cpu"
    [[packages]]
    name = "mypkg"; version = "2.8.3"; source = { kind = "pypi" }
    patches = []; knobs = {}; torch = "<2.14"; needs_cuda_torch = true
    [[packages]]
    use = "minikernel==0.1.0"          # the entry of recipes/shared/packages.toml, whole
    [stack]
    use = "cu13"                       # the line of recipes/shared/stacks.toml (recipes/shared.py)

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

Target driver (`resolve_for_host`), first found wins: the ``--driver`` flag, the host var
``target_driver`` (cross-building on a CPU-only box), the gathered facts
(``facts["gpu"]["driver_version"]``). The target arch follows the one rule of
sm120kit/recipes/target_arch.py (``--arch``, host var ``target_arch``, the GPU, a forced recipe's
first arch), the same rule the stack, `smoke` and `preflight` use.

The result is typed (`ResolvedRecipe.view`, sm120kit/recipes/resolved.py): operations read
``resolved.torch.version``, ``resolved.cuda.version.xy``, ``resolved.target.arch``; the flat
dotted keys below are the override scheme's names and plan's provenance rows.

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
``stack.build`` (the ``[stack]`` table and its lock: sm120kit/stack/lock.py).
``name`` and ``drivers`` select a recipe and cannot be overridden (use ``--recipe``). Overriding
``cuda.version`` drops the recipe's runfile/sha256/pip_packages of the old version and derives
them anew. A nested ``recipe:`` dict is refused: dicts replace rather than merge across groups.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import drivers as drv
from ..builds import knobs
from ..errors import RecipeError
from ..inventory.host import Host
from ..packages import engines, registry
from ..packages.base import PackageDescriptor
from .checks import (
    _INDEX_CUDA_RE,
    _PER_VERSION,
    _PKG_CHECKS,
    _SOURCE_KEYS,
    _TOP_CHECKS,
    SOURCE_KINDS,
    _arch_admitted,
    _Bad,
    _Check,
    _cu_tag,
    _cuda_problems,
    _knob,
    _torch_problem,
    normalize_arch,
    spec_text,
)

# Loading lives in recipe_files; callers keep asking recipes for it.
from .files import default_recipes_dir as default_recipes_dir
from .files import load_recipes as load_recipes
from .model import CudaChoice, PackageSpec, Recipe, ResolvedRecipe, Selection
from .resolved import Resolved, Target
from .target_arch import TARGET_ARCH_VAR, choose_target_arch, gpu_capabilities

OVERRIDE_PREFIX = "recipe."
#: Host vars that stand in for a GPU's driver and arch (cross-building; the arch's rule is
#: sm120kit/recipes/target_arch.py).
TARGET_DRIVER_VAR = "target_driver"


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
    put("python", list(recipe.pythons or (recipe.python,)))
    put("cuda.version", choice.version, choice.origins["version"])
    put("cuda.mirror", recipe.cuda.mirror)
    for name in ("method", "gcc_max", "runfile", "sha256", "pip_packages"):
        origin = choice.origins.get(name, "derived")
        if origin == "derived":
            continue  # derived again after overrides, from the final cuda.version
        value = getattr(choice, name)
        put(f"cuda.{name}", list(value) if isinstance(value, tuple) else value, origin)
    for key in ("version", "index", "cuda"):
        put(f"torch.{key}", getattr(recipe.torch, key))
        if recipe.torch_from:  # the shared stack's torch (recipes/shared/stacks.toml)
            sources[f"torch.{key}"] = recipe.torch_from
    for pkg in specs:
        where = f"packages[{next(i for i, p in enumerate(recipe.packages) if p is pkg)}]"
        base = f"packages.{pkg.name}."
        first = len(values)
        put(base + "version", pkg.version, where)
        for k, v in pkg.source.items():
            put(f"{base}source.{k}", v, where)
        put(base + "patches", list(pkg.patches), where)
        for k, v in pkg.knobs.items():
            put(f"{base}knobs.{k}", v, where)
        put(base + "torch", spec_text(pkg.torch) if pkg.torch is not None else "", where)
        put(base + "needs_cuda_torch", pkg.needs_cuda_torch, where)
        put(base + "dependencies", [dict(d) for d in pkg.dependencies], where)
        if pkg.derived:  # not in the recipe file: its stack's lock chose the shared entry
            for key in list(values)[first:]:
                sources[key] = pkg.derived
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
        # The one line says what to pass: a version string can name several commits of a
        # repository, so no commit is guessed for it.
        problems.append(
            f"source.ref is not pinned: which commit of {values[base + 'source.url']} to build "
            f"is not known; pass it as the inventory var recipe.{base}source.ref (host or group)"
        )
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
    target = choose_target_arch(
        host, facts, flag=arch_flag, served=[r.arch for r in recipes.values()]
    )
    arch = target.cc
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
    # The engine a host or group chose (inventory var `stack: vllm`): the recipe's variant
    # whose [stack] is that engine's line of the shared stacks.
    chosen = host.vars.get(engines.STACK_VAR)
    if chosen not in (None, ""):
        where = _var_source(host, engines.STACK_VAR)
        sel = dataclasses.replace(sel, recipe=sel.recipe.for_engine(str(chosen), where))
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
    if target.arch is None:  # a forced recipe, nothing naming an arch: the recipe's first
        target = choose_target_arch(
            host, facts, flag=arch_flag, recipe=(sel.recipe.name, sel.recipe.source, values["arch"])
        )
    if driver is not None:
        values["target.driver"], sources["target.driver"] = driver, driver_src
    if target.cc is not None:
        values["target.arch"], sources["target.arch"] = target.cc, target.source
    resolved = ResolvedRecipe(sel.recipe, sel, values, sources, specs=specs)
    _check_resolved(resolved, driver, driver_src, sel.arch)
    resolved.view = Resolved.from_flat(
        values, resolved.package_names(), Target(driver, driver_src if driver else "", target)
    )
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
    caps = gpu_capabilities(facts)
    if target.kind in ("flag", "host var") and caps and target.arch not in caps:
        resolved.notes.append(
            f"target arch {target.cc} ({target.source}) is not the GPU's "
            f"({', '.join(c.cc_text for c in caps)}): the stack, smoke and preflight are for "
            f"{target.cc}; pass --arch {caps[0].cc_text} to judge this GPU"
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
