"""Which file of a recipe's serving stack each distribution comes from, for one host.

Every distribution of the stack's lock (sm120kit/stack/lock.py) is a ``release`` (the lock's wheel,
sha256-pinned, verified before install when it holds shared objects) unless it is chosen as
``build``: by the lock (``from = "build"``), by the recipe's ``stack.build`` list (host
override ``recipe.stack.build``), or because its release fails verification. A build uses
the recipe's pinned source entry for exactly that name and version, built against the lock's
torch; with no such entry the host is refused with one line naming the package and version.

Verification here (plan) reads the controller's copy of a wheel when one is present (the
release cache `lock_draft.release_cache` or a ``file://`` index) and never downloads: a
wheel without a copy is verified on the host at provision, and `Choice.checked` says which.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name

from ..errors import HostFailed, RecipeError
from ..recipes.select import PackageSpec, ResolvedRecipe
from .draft import cached_copy, local_path
from .lock import Lock, LockEntry
from .release_check import verdict_line, verify_locked

#: Host var: ``false`` leaves the recipe's stack alone on the host (flag: ``--no-stack``);
#: ``true`` (or absent) installs it, the default.
STACK_VAR = "provision_stack"
#: Host var: the recipe packages `provision` builds besides the stack's own builds (default none).
PACKAGES_VAR = "provision_packages"


@dataclass
class Choice:
    """Where one locked distribution comes from on this host, and why."""

    entry: LockEntry
    source: str  # "release" | "build"
    why: str
    verdict: str = ""  # "ok" | "refused: ..." | "" (not verified yet)
    checked: str = ""  # what was checked, in words
    notes: list[str] = field(default_factory=list)
    build: dict[str, Any] = field(default_factory=dict)  # the pinned source of a build

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "version": self.entry.version,
            "from": self.source,
            "why": self.why,
            "sha256": self.entry.sha256,
            "url": self.entry.url,
            "compiled": self.entry.compiled,
            "verdict": self.verdict,
            "checked": self.checked,
            "notes": self.notes,
        }
        if self.build:
            doc["build"] = self.build
        return doc


@dataclass(frozen=True)
class Parts:
    """What one host's provision does: the stack or not, which recipe packages it builds,
    and why (one line each, shown by plan)."""

    stack: bool
    stack_why: str
    builds: tuple[str, ...]
    builds_why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "stack_why": self.stack_why,
            "builds": list(self.builds),
            "builds_why": self.builds_why,
        }


def provision_parts(
    *,
    recipe: str,
    has_stack: bool,
    host_vars: dict[str, Any],
    stack_flag: bool = False,
    no_stack_flag: bool = False,
    packages: list[str] | None = None,
) -> Parts:
    """Decide a host's provision: the recipe's serving stack by default (``--no-stack`` or
    host var ``provision_stack: false`` turn it off, ``--stack`` forces it), and builds only
    of the packages named (``--package``, else host var ``provision_packages``; default
    none). The stack's own builds (lock entries marked build) are the stack step's. Raises
    RecipeError with one line for both flags, a non-boolean host var, or a stack forced on
    a recipe without one."""
    if stack_flag and no_stack_flag:
        raise RecipeError("--stack and --no-stack both given: choose one")
    var = host_vars.get(STACK_VAR)
    if var is not None and not isinstance(var, bool):
        raise RecipeError(f"host var {STACK_VAR}: expected true or false, got {var!r}")
    if stack_flag:
        if not has_stack:
            raise RecipeError(f"--stack: recipe {recipe} has no [stack]")
        stack, why = True, "--stack"
    elif no_stack_flag:
        stack, why = False, "--no-stack"
    elif not has_stack:
        stack, why = False, f"recipe {recipe} has no [stack]"
    elif var is False:
        stack, why = False, f"host var {STACK_VAR}: false"
    else:
        stack = True
        why = (
            f"host var {STACK_VAR}: true" if var else f"recipe {recipe}'s serving stack, by default"
        )
    if packages is not None:
        builds, bwhy = tuple(packages), "--package"
    else:
        named = host_vars.get(PACKAGES_VAR)
        if named is not None and not (
            isinstance(named, list) and all(isinstance(n, str) for n in named)
        ):
            raise RecipeError(f"host var {PACKAGES_VAR}: expected a list of package names")
        builds = tuple(named or ())
        bwhy = f"host var {PACKAGES_VAR}" if named else f"none named (--package, {PACKAGES_VAR})"
    return Parts(stack, why, builds, bwhy)


def stack_build_names(resolved: ResolvedRecipe) -> list[str]:
    """The recipe packages the stack builds whatever verification says: the lock's entries
    marked build and ``stack.build`` (read without verifying anything)."""
    lock = resolved.recipe.lock
    if lock is None:
        return []
    wanted = {str(canonicalize_name(n)) for n in _stack_build(resolved)}
    out = []
    for entry in lock.packages:
        pkg = pinned_source(resolved, entry)
        if pkg is not None and (entry.key in wanted or entry.source == "build"):
            out.append(pkg.name)
    return out


def _stack_build(resolved: ResolvedRecipe) -> tuple[str, ...]:
    """``stack.build``: the lock's entries built whatever verification says."""
    return resolved.stack.build if resolved.stack is not None else ()


def pinned_source(resolved: ResolvedRecipe, entry: LockEntry) -> PackageSpec | None:
    """The recipe's package entry for exactly this distribution and version, if any."""
    for pkg in resolved.recipe.packages:
        if canonicalize_name(pkg.name) == entry.key and pkg.version == entry.version:
            return pkg
    return None


def _build_pins(pkg: PackageSpec, lock: Lock) -> dict[str, Any]:
    return {
        "package": pkg.name,
        "version": pkg.version,
        "source": dict(pkg.source),
        "patches": list(pkg.patches),
        "torch": lock.torch,
    }


def target_of(resolved: ResolvedRecipe) -> tuple[str, str]:
    """The host's target driver and arch (the driver as the recipe chose it; the arch by the
    one rule of sm120kit/recipes/target_arch.py, which smoke and preflight also follow)."""
    driver = resolved.target.driver
    arch = resolved.target.arch.cc or ""
    if not driver:
        raise RecipeError("the stack's releases are verified for the host's driver: it is unknown")
    return str(driver), str(arch)


def not_for_arch(resolved: ResolvedRecipe) -> dict[str, str]:
    """Modules reported, not judged: the stack's table plus the recipe packages' own."""
    out: dict[str, str] = {}
    for pkg in resolved.recipe.packages:
        out.update(pkg.not_for_arch)
    if resolved.recipe.stack is not None:
        out.update(resolved.recipe.stack.not_for_arch)
    return out


def shown(choice: Choice, lock: Lock, lock_loaders: dict[str, Any] | None = None) -> bool:
    """Whether plan's table lists the row (the rest is counted): the top, torch, kernel
    packages with a per-arch loader, builds, and anything with a verdict other than ok or
    a note."""
    e = choice.entry
    return (
        e.key in (lock.top_name, "torch")
        or (lock_loaders is not None and e.key in lock_loaders)
        or choice.source == "build"
        or bool(choice.notes)
        or bool(choice.verdict and choice.verdict != "ok")
    )


@functools.lru_cache(maxsize=64)
def _verify_once(
    path: str,
    sha256: str,
    driver: str,
    arch: str,
    python: str,
    skip: tuple[tuple[str, str], ...],
    variants: tuple[tuple[str, str], ...],
) -> dict[str, Any]:
    """One verification per file and target in a run, however many hosts share them."""
    return verify_locked(
        path,
        sha256=sha256,
        driver=driver,
        arch=arch,
        python=python,
        not_for_arch=dict(skip),
        variants=dict(variants) or None,
    )


def glibc_problem(lock: Lock, glibc: object) -> str | None:
    """Why a host with `glibc` (facts, "2.35") cannot install the lock's wheels: the lock's
    platform (``manylinux_2_34_x86_64``) needs that glibc or newer. None when it can or the
    host's glibc is unknown."""
    m = re.match(r"^manylinux_(\d+)_(\d+)_", lock.platform)
    if not m or not glibc:
        return None
    try:
        have = tuple(int(x) for x in str(glibc).split(".")[:2])
    except ValueError:
        return None
    want = (int(m.group(1)), int(m.group(2)))
    if have >= want:
        return None
    return (
        f"glibc {glibc} is older than {want[0]}.{want[1]}, which {lock.path.name} "
        f"({lock.platform}) needs"
    )


def choose(
    resolved: ResolvedRecipe,
    *,
    verify: Any = None,
    read_copies: bool = True,
    lock: Lock | None = None,
) -> tuple[Lock, list[Choice]]:
    """Every locked distribution's source on this host. `verify(entry, path)` reads a
    controller copy (default: `verify_locked` for the host's target); only the rows plan
    shows are verified here, every compiled release again on the host before install.
    `read_copies` False (provision: the host verifies anyway) reads a copy only for a
    release the recipe could build instead, the one case where the verdict picks the source.
    Raises HostFailed with one line for a build without a pinned source or a release that
    fails verification with none. `lock`: the lock of the host's Python (the ``python``
    step's, sm120kit/python_choice.py); default the recipe's first."""
    recipe = resolved.recipe
    if recipe.stack is None or recipe.lock is None:
        raise RecipeError(f"recipe {recipe.name} ({recipe.source}) has no [stack]")
    lock = lock or recipe.lock
    driver, arch = target_of(resolved)
    skip = not_for_arch(resolved)
    loaders = recipe.stack.loaders
    wanted = {str(canonicalize_name(n)) for n in _stack_build(resolved)}
    unknown = sorted(n for n in wanted if lock.entry(n) is None)
    if unknown:
        src = resolved.sources.get("stack.build", recipe.source)
        raise RecipeError(
            f"stack.build (from {src}): {', '.join(unknown)} not in {recipe.stack.lock}"
        )

    def check(entry: LockEntry) -> tuple[str, list[str], str]:
        path = cached_copy(entry)
        if path is None:
            draft = (
                f"; the lock's draft verdict for driver {lock.target.get('driver')}: {entry.verdict}"
                if entry.verdict
                else ""
            )
            return "", [], f"verified on the host at provision (no controller copy){draft}"
        if verify is not None:
            doc = verify(entry, path)
        else:
            doc = _verify_once(
                str(path),
                entry.sha256,
                driver,
                arch,
                lock.python,
                tuple(sorted(skip.items())),
                tuple(sorted((loaders.get(entry.key) or {}).items())),
            )
        where = "local index file" if local_path(entry.url) else "controller's release cache"
        return (
            verdict_line(doc),
            list(doc.get("notes") or []),
            (
                f"sha256, cudart and SASS/PTX read from the {where} copy for driver {driver}, arch {arch}"
            ),
        )

    choices = []
    for entry in lock.packages:
        pkg = pinned_source(resolved, entry)
        if entry.key in wanted or entry.source == "build":
            why = "stack.build" if entry.key in wanted else "the lock says build"
            if pkg is None:
                raise HostFailed(
                    f"{entry.name} {entry.version}: build chosen ({why}) but recipe "
                    f"{recipe.name} pins no source for {entry.name} {entry.version}"
                )
            choices.append(Choice(entry, "build", why, build=_build_pins(pkg, lock)))
            continue
        on_host = "sha256 and verification" if entry.compiled else "sha256"
        choice = Choice(
            entry, "release", "the lock's release", checked=f"{on_host} on the host before install"
        )
        if entry.compiled and shown(choice, lock, loaders) and (read_copies or pkg is not None):
            choice.verdict, choice.notes, choice.checked = check(entry)
        if choice.verdict.startswith("refused"):
            line = f"{entry.name} {entry.version}: {choice.verdict[len('refused: ') :]}"
            if pkg is None:
                raise HostFailed(f"{line}; recipe {recipe.name} pins no source to build instead")
            choice = Choice(
                entry,
                "build",
                f"the release fails verification ({line})",
                build=_build_pins(pkg, lock),
            )
        choices.append(choice)
    return lock, choices
