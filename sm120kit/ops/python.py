"""Step ``python``: the host's Python for this run, picked by `sm120kit/python_choice.py`'s rule,
looked up in the host's package archive when needed and installed in provision."""

from __future__ import annotations

from collections.abc import Collection

from ..errors import HostFailed
from ..host_facts import FoundPython
from ..python_choice import (
    INSTALL_TIMEOUT,
    PythonChoice,
    allow_system_python,
    archive_has,
    lock_context,
    package_manager,
    pick_python,
    stack_pythons,
)
from ..runner.pool import HostContext
from ..state import ProvisionState
from ..toolchain.toolkit_install import sudo_prefix, sudo_stdin


def ensure_python(ctx: HostContext, state: ProvisionState, *, stack: bool) -> PythonChoice:
    """The ``python`` step: pick (`pick_python`), look the archive up when needed, install
    in provision; sets ``state.python`` and ``state.stack_lock``. `stack`: this run installs
    or shows the stack, so only a Python with a lock serves."""
    if state.python is not None:
        return state.python
    prefer = list(state.resolved.python)
    locks = stack_pythons(state) if stack else None
    name = state.host.name
    has_password = bool(ctx.runner.options.connect.sudo_password)
    sudo = sudo_prefix(state.facts.json, has_password)
    unlocked, draft = lock_context(state, locks, prefer)
    allow = allow_system_python(state)

    def pick(archive: Collection[str] | None) -> PythonChoice:
        return pick_python(
            state.facts.json,
            prefer,
            locks,
            archive=archive,
            sudo=sudo,
            unlocked=unlocked,
            allow_system=allow,
            draft=draft,
        )

    with ctx.step("python") as step:
        choice = pick(None)
        if choice.query:
            manager = package_manager(state.facts.json) or ""
            out = ctx.run(choice.query[0], check=False, what="archive lookup")
            choice = pick(archive_has(manager, out.stdout))
        if choice.refusal:
            raise HostFailed(f"{name}: {choice.refusal}")
        assert choice.version is not None
        lock = locks.get(choice.version) if locks else None
        which = f"lock {lock.path.name}, " if lock is not None else ""
        state.python = choice
        state.stack_lock = lock
        ctx.set(python=choice.to_dict())
        if not choice.install:
            step.message = f"Python {choice.version}: {which}{choice.path}: {choice.why}"
            return choice
        what = f"install Python {choice.version} ({which}{choice.path}): {choice.why}"
        if not ctx.may_act(step, what, list(choice.install)):
            return choice
        step.commands = list(choice.install)
        stdin = sudo_stdin(sudo, ctx.runner.options.connect.sudo_password)
        for command in choice.install:
            ctx.run(command, stdin=stdin, timeout=INSTALL_TIMEOUT)
        got = ctx.run(f"command -v python{choice.version}", check=False)
        path = got.stdout.strip() or str(choice.path)
        choice = PythonChoice(choice.version, path, choice.why, install=list(choice.install))
        state.python = choice
        # Later steps of this run read the facts: let them see the new interpreter.
        state.facts.add_python(FoundPython(path, choice.version))
        step.message = f"installed Python {choice.version} at {path} ({which.rstrip(', ')})"
    return choice
