"""Which Python a host's serving stack and build env use, and how a missing one is installed.

The recipe's ``python`` is an ordered list of preference (``["3.11", "3.12", "3.13"]``; a
plain ``"3.11"`` is a one-item list). `pick_python` is the pure rule, facts in, choice out:

1. Of the recipe's Pythons that have a lock (`sm120kit.stack.lock.stack_locks`; every one when
   there is no stack), the first the host already has (facts: its ``python3.X`` on PATH).
2. Else the first of them the distribution's archive has: apt ``python3.X`` plus
   ``python3.X-venv`` (known from ``apt-cache policy``), or dnf ``python3.X`` (``dnf info``),
   installed through sudo by the same rules as the toolkit's apt method (`sudo_prefix`).
3. Else one line naming what to install.

A host whose Pythons have no lock (3.13 only, the locks being for 3.11 and 3.12) is told why, from
the locks (`no_lock_reason`: the distributions they pin one wheel per Python of), with what the
step will do. Installing the distribution's Python is a root install (apt-get/dnf through sudo),
said so in the plan; host var ``allow_system_python: false`` (or ``--no-system-python``) refuses
it, and the one line then says what would serve instead.

`ensure_python` (sm120kit/ops/python.py) is the ``python`` step: plan shows the lock and the interpreter it chose and
why, or the install it would run; provision runs that install, then the stack (and the build
env) use the interpreter and the lock of that Python.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Mapping
from typing import Any

from .stack.lock import Lock
from .state import ProvisionState, PythonChoice

#: os-release ``ID``/``ID_LIKE`` words and the package manager of their archive.
_FAMILIES = {
    "debian": "apt",
    "ubuntu": "apt",
    "rhel": "dnf",
    "fedora": "dnf",
    "centos": "dnf",
    "rocky": "dnf",
    "almalinux": "dnf",
}
INSTALL_TIMEOUT = 1800.0
#: Host var: false refuses installing the distribution's Python as root (default true).
ALLOW_SYSTEM_PYTHON_VAR = "allow_system_python"


def preference(value: Any) -> list[str]:
    """A recipe's (or host var's) ``python``: one X.Y or a list, as a list in order."""
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value or []]


def host_pythons(facts: Mapping[str, Any]) -> dict[str, str]:
    """X.Y -> the first interpreter path of that version on the host's PATH (facts)."""
    out: dict[str, str] = {}
    for entry in facts.get("python") or []:
        xy = ".".join(str(entry.get("version", "")).split(".")[:2])
        if xy and entry.get("path"):
            out.setdefault(xy, str(entry["path"]))
    return out


def package_manager(facts: Mapping[str, Any]) -> str | None:
    """``apt`` or ``dnf`` from os-release's ID and ID_LIKE, else None."""
    os_ = facts.get("os") or {}
    words = [str(os_.get("id") or "")] + str(os_.get("id_like") or "").split()
    for word in words:
        if word in _FAMILIES:
            return _FAMILIES[word]
    return None


def packages_for(manager: str, xy: str) -> list[str]:
    """The distribution packages that give a Python X.Y with its venv module."""
    return [f"python{xy}", f"python{xy}-venv"] if manager == "apt" else [f"python{xy}"]


def query_command(manager: str, wanted: list[str]) -> str:
    """The read-only archive lookup for every wanted X.Y's packages."""
    names = [p for xy in wanted for p in packages_for(manager, xy)]
    if manager == "apt":
        return "LC_ALL=C apt-cache policy " + " ".join(names)
    return "LC_ALL=C dnf info --quiet " + " ".join(names)


def archive_has(manager: str, output: str) -> set[str]:
    """Package names the lookup's output offers (apt: a Candidate other than ``(none)``;
    dnf: each ``Name :`` line)."""
    if manager == "apt":
        found, current = set(), None
        for line in output.splitlines():
            head = re.match(r"^(\S+):$", line)
            if head:
                current = head.group(1)
                continue
            cand = re.match(r"^\s+Candidate:\s*(\S+)", line)
            if cand and current and cand.group(1) != "(none)":
                found.add(current)
        return found
    return set(re.findall(r"^Name\s*:\s*(\S+)", output, re.M))


def python_version(state: ProvisionState) -> str:
    """The X.Y this host's envs use: the ``python`` step's, else the recipe's first. (Here,
    not on ProvisionState: state.py importing this module, which imports state.py, was an
    import cycle, tests/rules/test_imports.py.)"""
    if state.python is not None and state.python.version:
        return str(state.python.version)
    prefer = list(state.resolved.python) or ["3.11"]
    # Without the python step (build, compile): the first the host has, else the first.
    return pick_python(state.facts.json, prefer, None).version or prefer[0]


def _python_tag(filename: str) -> str:
    """``cp312`` of a wheel built for one CPython (``cp312-cp312``), else "" (``py3-none``,
    ``cp310-abi3``: one wheel serves every Python)."""
    parts = filename[:-4].split("-") if filename.endswith(".whl") else []
    if len(parts) < 5:
        return ""
    py, abi = parts[-3], parts[-2]
    return py if py.startswith("cp") and abi not in ("abi3", "none") else ""


def no_lock_reason(locks: Mapping[str, Lock], xy: str, where: str) -> str:
    """Why Python `xy` has no lock, read from the locks there are (`where`: their directory):
    the distributions they pin one wheel per Python of, which a `xy` env needs built for it."""
    if not locks:
        return f"no lock for Python {xy}: {where} has none"
    order = sorted(locks, key=lambda v: tuple(int(p) for p in v.split(".")))
    head = f"no lock for Python {xy}: {where} has locks for {' and '.join(order)} only"
    lock = locks[order[-1]]
    per = [(e, t) for e in lock.packages for t in [_python_tag(e.filename)] if t]
    if not per:
        return head
    top = lock.top_name
    first = sorted(per, key=lambda p: (p[0].key != top, p[0].key != "torch", not p[0].compiled))
    named = ", ".join(f"{e.name} {e.version}" for e, _ in first[:3])
    more = f" and {len(per) - 3} more" if len(per) > 3 else ""
    return (
        f"{head}, and {len(per)} of the distributions they pin ship one wheel per Python "
        f"({named}{more}: {per[0][1]} wheels in {lock.path.name}): a {xy} env needs "
        f"cp{xy.replace('.', '')} wheels of them, which no lock here pins"
    )


def pick_python(
    facts: Mapping[str, Any],
    prefer: list[str],
    locks_available: Collection[str] | None,
    *,
    archive: Collection[str] | None = None,
    sudo: str = "",
    unlocked: Mapping[str, str] | None = None,
    allow_system: bool = True,
    draft: str = "",
) -> PythonChoice:
    """The rule (module docstring). `locks_available`: the X.Y the stack has locks for (None:
    no stack, every preference serves). `archive`: package names the distribution's archive
    offers (`archive_has`); None while not yet looked up, and then a choice that must install
    carries the lookup in `query`. `sudo`: the prefix of root commands (`sudo_prefix`).
    `unlocked`: X.Y -> why it has no lock (`no_lock_reason`), said for each the host has.
    `allow_system`: False refuses installing the distribution's Python (root). `draft`: the
    command that drafts the stack's locks again (named when no wanted Python has a lock)."""
    order = ", ".join(prefer)
    usable = [p for p in prefer if locks_available is None or p in locks_available]
    if not usable:
        have = ", ".join(sorted(locks_available or [])) or "none"
        why = "; ".join((unlocked or {}).get(p, "") for p in prefer if (unlocked or {}).get(p))
        redo = (
            f", or draft the locks again where the index has the wheels: {draft}" if draft else ""
        )
        return PythonChoice(
            None,
            None,
            "",
            refusal=f"the recipe wants Python {' or '.join(prefer)} but its stack has locks for "
            f"{have} only{' (' + why + ')' if why else ''}: set recipe.python to one of "
            f"{have}{redo}",
        )
    pythons = host_pythons(facts)
    reasons = [(unlocked or {})[v] for v in sorted(pythons) if v in (unlocked or {})]
    context = "".join(f"; {r}" for r in reasons)
    serves = "with a lock" if locks_available is not None else "of the recipe"
    for xy in usable:
        if xy in pythons:
            skipped = [p for p in usable[: usable.index(xy)]]
            why = f"the host has python{xy} ({pythons[xy]}), the first {serves} in the recipe's order ({order})"
            if skipped:
                why += f"; it has no {', '.join('python' + s for s in skipped)}"
            return PythonChoice(xy, pythons[xy], why)
    have = ", ".join(f"{v} ({p})" for v, p in sorted(pythons.items())) or "none"
    manager = package_manager(facts)
    os_ = facts.get("os") or {}
    distro = os_.get("pretty") or os_.get("id") or "this distribution"
    if manager is None:
        return PythonChoice(
            None,
            None,
            "",
            refusal=f"the recipe wants Python {' or '.join(usable)} but the host has {have}"
            f"{context}; install python{usable[0]} with its venv module ({distro}: no apt or "
            "dnf known here)",
        )
    if not allow_system:
        redo = f", or a lock for the host's Python: {draft}" if draft and pythons else ""
        return PythonChoice(
            None,
            None,
            "",
            refusal=f"the recipe wants Python {' or '.join(usable)} but the host has {have}"
            f"{context}; installing the distribution's python{usable[0]} as root is refused "
            f"(host var {ALLOW_SYSTEM_PYTHON_VAR}: false, or --no-system-python): install "
            f"Python {' or '.join(usable)} with its venv module on the host{redo}",
        )
    if archive is None:
        return PythonChoice(None, None, "", query=[query_command(manager, usable)])
    for xy in usable:
        names = packages_for(manager, xy)
        if all(n in archive for n in names):
            if manager == "apt":
                install = [
                    f"{sudo}apt-get update",
                    f"{sudo}env DEBIAN_FRONTEND=noninteractive apt-get install -y "
                    "--no-install-recommends " + " ".join(shlex.quote(n) for n in names),
                ]
            else:
                install = [f"{sudo}dnf install -y " + " ".join(shlex.quote(n) for n in names)]
            root = "as root" if not sudo else f"as root ({sudo.strip()})"
            why = (
                f"the host has no {' or '.join('python' + p for p in usable)} (it has {have})"
                f"{context}; {distro}'s {manager} archive has {' and '.join(names)}: the step "
                f"installs them {root}, a system package (host var {ALLOW_SYSTEM_PYTHON_VAR}: "
                "false refuses it)"
            )
            return PythonChoice(xy, f"/usr/bin/python{xy}", why, install=install)
    wanted = " or ".join(" + ".join(packages_for(manager, xy)) for xy in usable)
    return PythonChoice(
        None,
        None,
        "",
        refusal=f"the recipe wants Python {' or '.join(usable)} but the host has {have}"
        f"{context}, and {distro}'s {manager} archive has no {wanted}: install one of them "
        "with its venv module",
    )


def stack_pythons(state: ProvisionState) -> dict[str, Lock] | None:
    """X.Y -> the stack's lock for it (None: the recipe has no stack)."""
    recipe = state.resolved.recipe
    if recipe.stack is None:
        return None
    if recipe.locks:
        return dict(recipe.locks)
    return {recipe.lock.python: recipe.lock} if recipe.lock is not None else {}


def serving_lock(state: ProvisionState) -> Lock | None:
    """The lock whose env serves this host now: the ``python`` step's, else the one of the
    Python `pick_python` takes from what the host already has (no archive lookup, nothing
    installed), else the recipe's first; None for a recipe without a stack. Smoke and
    preflight read the env of this lock, the one provision made on this host."""
    if state.stack_lock is not None:
        return state.stack_lock
    locks = stack_pythons(state)
    if not locks:
        return None
    choice = pick_python(state.facts.json, list(state.resolved.python), locks)
    lock = locks.get(choice.version) if choice.version else None
    return lock or state.resolved.recipe.lock


def allow_system_python(state: ProvisionState) -> bool:
    """Whether the python step may install the distribution's Python as root: not with
    ``--no-system-python`` or host var ``allow_system_python: false`` (its type is checked
    when the inventory is read, sm120kit/inventory/hostvars.py)."""
    if state.flags.no_system_python:
        return False
    return state.host.vars.get(ALLOW_SYSTEM_PYTHON_VAR) is not False


def lock_context(
    state: ProvisionState, locks: Mapping[str, Lock] | None, prefer: list[str]
) -> tuple[dict[str, str], str]:
    """`pick_python`'s `unlocked` (why each recipe Python without a lock has none) and `draft`
    (the lock.draft command for this recipe's stack, every Python the release has wheels
    for, so the directory's catalogue stays whole)."""
    recipe = state.resolved.recipe
    if locks is None or recipe.stack is None:
        return {}, ""
    where = recipe.stack.locks
    unlocked = {xy: no_lock_reason(locks, xy, where) for xy in prefer if xy not in locks}
    return unlocked, f"invoke lock.draft --top {recipe.stack.top} --recipe {recipe.name}"
