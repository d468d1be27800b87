"""Semantic checks of values that name paths or numbers, run before any host is touched.

Values that end up in a shell command, an environment variable nvcc hands to `sh`, or a
cache key are refused here when they cannot be right, with one line naming where the value
came from (the inventory file and host, the flag, or the setting). Type checks of host vars
and YAML structure live in inventory/files.py; this module says what a *good* value is.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from . import drivers as drv
from .errors import HostFailed, RecipeError, Sm120Error, one_line
from .recipes.select import normalize_arch, select_recipe
from .settings import parse_number

#: Characters a path value may hold: no blanks, quotes, `$`, backticks, `;`, `|`, `&`,
#: redirections, globs or newlines. nvcc runs its host compiler through `sh` (so quoting on
#: our side cannot protect NVCC_CCBIN), and a value like this never needs more.
_SAFE_PATH = re.compile(r"[A-Za-z0-9._+/@%=,:-]+")


def check_work_root(value: Any, where: str = "work_root") -> str:
    """`work_root` must be an absolute path or `~/...` (the login user's home), plain chars.

    A relative path would be resolved against the controller's working directory for
    `local` (a provision writing into the checkout) and against the login directory over
    SSH; `~user/...` depends on another account. `where` starts the error (file, line and
    key path when the caller knows them). Returns the value.
    """
    if not isinstance(value, str) or not value:
        raise Sm120Error(f"{where}: must be a path string (absolute, or ~/...), got {value!r}")
    if not _SAFE_PATH.fullmatch(value.lstrip("~")) or "\n" in value:
        raise Sm120Error(
            f"{where}: {value!r} holds characters a path here may not "
            "(blanks, quotes, $, `, ;, |, &, <, >, *, ?, newlines)"
        )
    if value.startswith("~"):
        if value != "~" and not value.startswith("~/"):
            raise Sm120Error(
                f"{where}: {value!r} names another user's home; use an absolute path or ~/..."
            )
    elif not value.startswith("/"):
        raise Sm120Error(
            f"{where}: {value!r} is relative; use an absolute path or ~/... (a relative one "
            "would land wherever the command happens to run)"
        )
    if "/../" in f"{value}/" or value.endswith("/.."):
        raise Sm120Error(f"{where}: {value!r} must not climb with '..'")
    return value


def check_ccbin(value: Any, where: str = "nvcc_ccbin") -> str:
    """`nvcc_ccbin` must be an absolute path of plain characters naming a gcc or g++.

    Whether it exists and which GCC it really is are checked on the host, by running it
    (ops/toolkit.py's host-compiler step). `where` starts the error. Returns the value.
    """
    if not isinstance(value, str) or not value:
        raise Sm120Error(f"{where}: must be an absolute path to gcc/g++, got {value!r}")
    if not _SAFE_PATH.fullmatch(value):
        raise Sm120Error(
            f"{where}: {value!r} holds characters a compiler path may not (nvcc runs it "
            "through sh: blanks, quotes, $, `, ;, |, &, <, >, *, ? are refused)"
        )
    if not value.startswith("/"):
        raise Sm120Error(f"{where}: {value!r} must be an absolute path (e.g. /usr/bin/gcc-14)")
    base = value.rsplit("/", 1)[-1]
    if not re.fullmatch(r"(?:[\w.+-]*-)?(?:gcc|g\+\+)(?:-\d+(?:\.\d+)*)?", base):
        raise Sm120Error(
            f"{where}: {value!r} does not name gcc or g++ (e.g. /usr/bin/gcc-14); nvcc's "
            "host compiler on Linux is GCC"
        )
    return value


def check_host_vars(name: str, vars_: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """The path-naming host vars of host `name`: work_root, nvcc_ccbin."""
    if "work_root" in vars_:
        check_work_root(vars_["work_root"], _where(name, sources, "work_root"))
    if vars_.get("nvcc_ccbin") not in (None, ""):
        check_ccbin(vars_["nvcc_ccbin"], _where(name, sources, "nvcc_ccbin"))
    if isinstance(vars_.get("pip_args"), str):
        check_pip_args(vars_["pip_args"], _where(name, sources, "pip_args"))


def check_pip_args(value: str, where: str = "pip_args") -> list[str]:
    """A string `pip_args` split like a shell would (toolchain/toolkit_spec.py's `pip_args` does the
    same); an unbalanced quote is an input error here, not a ValueError mid-run."""

    try:
        return shlex.split(value)
    except ValueError as exc:
        raise Sm120Error(
            f"{where}: {value!r} does not split like shell words ({exc}); write it as a "
            "list of strings"
        ) from None


def _where(host: str, sources: Mapping[str, str], key: str) -> str:
    origin = sources.get(key)
    return f"host {host} ({origin}): {key}" if origin else f"host {host}: {key}"


def number(
    value: Any,
    what: str,
    *,
    kind: type = int,
    minimum: float = 0,
    above: bool = False,
    maximum: float | None = None,
) -> Any:
    """`value` as a finite int/float >= minimum (> minimum with `above`), <= `maximum`;
    Sm120Error naming `what`. The same parser as every setting's
    (`sm120kit.settings.parse_number`)."""

    return parse_number(value, what, kind=kind, minimum=minimum, above=above, maximum=maximum)


def check_regex(pattern: str | None, flag: str) -> None:
    """A regex flag compiled on the controller, before any host: the host would compile it
    only after waiting out the whole timeout."""
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise Sm120Error(f"{flag} {pattern!r}: not a regular expression ({exc})") from None


def parse_gcc_version(text: str) -> str | None:
    """The version `gcc -dumpfullversion -dumpversion` printed (e.g. "14.2.0"), or None."""
    line = (text or "").strip().splitlines()[:1]
    if line and re.fullmatch(r"\d+(?:\.\d+)*", line[0].strip()):
        return line[0].strip()
    return None


def check_recipe_flags(
    recipes: Mapping[str, Any], driver: str | None, arch: str | None, recipe: str | None
) -> None:
    """--recipe, --driver and --arch against the loaded recipes, before any host is touched."""

    if recipe is not None and recipe not in recipes:
        raise RecipeError(
            f"--recipe {recipe!r}: no such recipe (have: {', '.join(sorted(recipes)) or 'none'})"
        )
    if driver is not None:
        try:
            drv.parse_driver_version(str(driver))
        except ValueError as exc:
            raise RecipeError(f"--driver {driver!r}: {one_line(str(exc))}") from None
    norm: str | None = None
    if arch is not None:
        try:
            norm = normalize_arch(arch)
        except ValueError as exc:
            raise RecipeError(f"--arch {arch!r}: {one_line(str(exc))}") from None
        if recipe is None and not any(
            norm in {normalize_arch(a) for a in r.arch} for r in recipes.values()
        ):
            targeted = sorted({normalize_arch(a) for r in recipes.values() for a in r.arch})
            raise RecipeError(
                f"--arch {arch!r}: no recipe targets compute capability {norm} (recipes "
                f"target {', '.join(targeted)})"
            )
    if driver is not None:
        try:
            select_recipe(recipes, driver=str(driver), arch=norm or "12.0", forced=recipe)
        except RecipeError as exc:
            raise RecipeError(f"--driver {driver!r}: {one_line(str(exc))}") from None


def check_space(facts: Mapping[str, Any], needed: int, what: str, host: str) -> None:
    """Refuse a step when facts say the disk under work_root has less than `needed` bytes free.

    Facts measure the free space once, at the start of the run; a step that needs more than
    that fails here with both figures instead of half-way with a tool's own error (ensurepip,
    tar, pip) that says nothing about space.
    """

    disk = facts.get("disk") or {}
    free = disk.get("free_bytes")
    if not isinstance(free, (int, float)) or free >= needed:
        return
    raise HostFailed(
        f"{host}: not enough disk for {what} under {disk.get('path', 'work_root')}: needs "
        f"{_size(needed)} ({needed} bytes), {_size(free)} ({int(free)} bytes) free; free "
        "some space or set host var work_root to a larger disk"
    )


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"
