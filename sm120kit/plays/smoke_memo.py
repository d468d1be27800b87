"""Remembered smoke verdicts: a no-op `provision` re-checks state but does not re-smoke.

Smoke imports torch in fresh interpreters, which costs seconds to tens of seconds per host;
nothing it looks at changes unless the installed builds, the env or the checks change. So
`provision` keys each verdict by a fingerprint of exactly those (remote/smoke_memo.py):

- per package, the sha256 of the installed distribution's RECORD (the sha256 of every file pip
  installed: another build of the same version differs) and the install record's wheel sha256;
- the sha256 of the env's marker (Python, torch build and its facts, tools);
- the env's tree: every directory under it but ``__pycache__``, by path and mtime (a
  distribution installed, removed or rewritten, a file replaced by hand: another key);
- the sha256 of the probe and of the code that judges it (a changed check re-smokes);
- the recipe's arch list and the host's GPUs (none, or their compute capabilities).

The verdict is stored on the host under ``<work_root>/state/smoke/<key>.json`` after a smoke
run, keyed by the state the run left (fingerprinted again after it: a check that wrote into
the env does not miss its own verdict next time). A passing verdict is reused (one remote
command) and says so: ``"smoke": {"reused": true, ...}`` in the JSON, ``"reused": true`` in
each package's verdict. A failed one (the checks ran and judged the env bad: `ChecksFailed`,
not a probe that could not run) fails the step again at once with the old reason, when it
was judged, and the hint to run it with ``--recheck`` (`smoke_check.failed_again`), instead
of the same 14-46 s of checks. `provision --recheck` always runs the checks (and refreshes
the memo); the `smoke` task never reads it.

`provision --stack`'s ``stack smoke`` (`stack_smoke_or_reuse`) uses the same mechanism
(`look_up`, `remember`) for the serving env: its marker is the env's record of what it holds
by sha256 (`names.STACK_RECORD`), and its context the checks' code, the recipe's declarations,
the stack knowledge the probe is given, the target arch and whether the host has a GPU
(`plays/smoke.stack_verdict_context`).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from ..errors import ChecksFailed, HostFailed, one_line
from ..remote import script_bundle
from ..remote.lib.names import ENV_MARKER, STACK_RECORD
from ..runner.pool import HostContext
from ..smoke.report import reuse
from ..state import ProvisionState
from . import smoke as smoke_check

SCRIPT = "smoke_memo"
#: The code a verdict comes from: the probe that runs on the host and the modules judging it.
_VERDICT_CODE = ("smoke/report.py", "plays/smoke.py")


def code_digest() -> str:
    """sha256 over the smoke probe and the modules that judge its output."""
    h = hashlib.sha256(script_bundle("extension_probe").encode())
    root = Path(__file__).resolve().parent.parent
    for rel in _VERDICT_CODE:
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def context(state: ProvisionState) -> dict[str, Any]:
    """What besides the installed files decides a verdict: checks, arch, GPUs."""
    gpu = state.facts.gpu
    gpus = [g.compute_cap for g in gpu.gpus] if gpu.present else []
    # The recipe's declarations (torch pin, modules not for the arch by design) change
    # verdicts too, so a recipe edit must not reuse a verdict judged under the old one.
    return {
        "code": code_digest(),
        "arch": state.arch_list,
        "gpus": gpus,
        "declarations": _declarations(state),
    }


def _declarations(state: ProvisionState) -> dict[str, Any]:

    return smoke_check.declarations(state)


def memo_dir(state: ProvisionState) -> str:
    return state.paths.join("state", "smoke")


def look_up(
    ctx: HostContext,
    state: ProvisionState,
    *,
    env: str,
    marker: str,
    packages: list[str],
    context: dict[str, Any],
) -> tuple[str | None, dict[str, Any] | None]:
    """One remote command: the key of a verdict's inputs (the sha256 of `env`'s `marker` file,
    of each package's RECORD and install record, of the env's tree and of `context`), and the
    verdict remembered under it (None: none). The key is None when something is not
    fingerprintable (no marker, a package not installed): such a verdict is never
    remembered."""
    args = {
        "action": "check",
        "env": env,
        "marker": marker,
        "packages": list(packages),
        "memo_dir": memo_dir(state),
        "context": context,
        "tree": True,
    }
    found = ctx.script(SCRIPT, args)
    key, memo = found.get("key"), found.get("memo")
    return (str(key) if key else None), (memo if isinstance(memo, dict) else None)


def remember(ctx: HostContext, state: ProvisionState, key: str, doc: dict[str, Any]) -> None:
    """Store a verdict under `key` (from `look_up`) on the host."""
    ctx.script(SCRIPT, {"action": "store", "memo_dir": memo_dir(state), "key": key, "doc": doc})


def remember_after(
    ctx: HostContext,
    state: ProvisionState,
    doc: dict[str, Any],
    *,
    env: str,
    marker: str,
    packages: list[str],
    context: dict[str, Any],
) -> None:
    """Store `doc` under the key of the state the check left (fingerprinted again: whatever
    the check itself wrote into the env is in it), unless that state is not fingerprintable."""
    key, _memo = look_up(ctx, state, env=env, marker=marker, packages=packages, context=context)
    if key:
        remember(ctx, state, key, doc)


def failed_doc(ctx: HostContext, exc: ChecksFailed, summary: str) -> dict[str, Any]:
    """The remembered form of a failed check: its one line, when, and the run that has its log."""
    return {
        "failed": one_line(str(exc)),
        "summary": summary,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run_dir": str(ctx.runner.run_dir) if ctx.runner.run_dir else None,
    }


def smoke_or_reuse(
    ctx: HostContext, state: ProvisionState, names: list[str], *, recheck: bool = False
) -> None:
    """`provision`'s smoke step: reuse the remembered verdict when nothing changed, else run it."""

    if not names:
        return
    env = smoke_check.managed_env_path(state)
    start = time.monotonic()
    key, memo = look_up(
        ctx, state, env=env, marker=ENV_MARKER, packages=names, context=context(state)
    )
    looked_up = time.monotonic() - start  # counted in the smoke step's time below
    decision = reuse(memo, recheck=recheck)
    if memo and decision != "run":
        try:
            with ctx.step("smoke") as step:
                verdicts = memo.get("packages") or {}
                for name in names:
                    verdict = dict(verdicts.get(name) or {})
                    state.packages.setdefault(name, {})["smoke"] = {**verdict, "reused": True}
                ctx.set(
                    smoke={
                        "reused": True,
                        "key": key,
                        "checked_at": memo.get("checked_at"),
                        "run_dir": memo.get("run_dir"),
                        "packages": {n: (verdicts.get(n) or {}).get("status") for n in names},
                    }
                )
                if decision == "fail":
                    raise HostFailed(
                        smoke_check.failed_again(memo, "the installed builds, the env")
                    )
                step.message = (
                    f"reused the verdict of {memo.get('checked_at')} ({memo.get('summary')}): "
                    "installed builds, env, checks, arch and GPUs unchanged"
                )
        finally:
            _add_seconds(ctx, looked_up)
        return
    fingerprint: dict[str, Any] = {
        "env": env,
        "marker": ENV_MARKER,
        "packages": names,
        "context": context(state),
    }
    try:
        smoke_check.smoke_packages(ctx, state, names)
    except ChecksFailed as exc:
        # Judged bad: remembered, so that a rerun with nothing changed says so in a second.
        last = ctx.result.steps[-1] if ctx.result.steps else None
        doc = {
            **failed_doc(ctx, exc, last.message if last else ""),
            "packages": _verdicts(state, names),
        }
        if key:
            remember_after(ctx, state, doc, **fingerprint)
        raise
    finally:
        _add_seconds(ctx, looked_up)
    ran = ctx.result.data.get("smoke")
    if isinstance(ran, dict):
        ran["reused"] = False
    for name in names:
        fresh = state.packages.get(name, {}).get("smoke")
        if isinstance(fresh, dict):
            fresh["reused"] = False
    if not key:
        return  # something not fingerprintable (no marker or RECORD): never remembered
    last = ctx.result.steps[-1] if ctx.result.steps else None
    passed = {
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "summary": last.message if last is not None else "",
        "run_dir": str(ctx.runner.run_dir) if ctx.runner.run_dir else None,
        "packages": _verdicts(state, names),
    }
    remember_after(ctx, state, passed, **fingerprint)


def _verdicts(state: ProvisionState, names: list[str]) -> dict[str, Any]:
    """Each package's smoke verdict as remembered (without the run's ``reused``)."""
    return {
        n: {k: v for k, v in state.packages[n]["smoke"].items() if k != "reused"}
        for n in names
        if isinstance(state.packages.get(n, {}).get("smoke"), dict)
    }


def stack_smoke_or_reuse(ctx: HostContext, state: ProvisionState, env: str, *, fresh: bool) -> None:
    """`provision --stack`'s ``stack smoke``: reuse the serving env's remembered verdict (a
    pass passes, a fail fails again at once) while nothing it depends on changed, else run it
    (`plays/smoke.smoke_stack`) and remember what it judged. `fresh` (the stack step
    changed the env, or ``--recheck``): always run."""

    context = {**smoke_check.stack_verdict_context(state), "code": code_digest()}
    fingerprint: dict[str, Any] = {
        "env": env,
        "marker": STACK_RECORD,
        "packages": [],
        "context": context,
    }
    key, memo = look_up(ctx, state, **fingerprint)
    try:
        remembered = None if reuse(memo, recheck=fresh) == "run" else memo
        passed = smoke_check.smoke_stack(ctx, state, env, memo=remembered)
    except ChecksFailed as exc:
        if key:
            judged = ctx.result.data.get("stack_smoke") or {}
            doc = {k: judged.get(k) for k in ("checked", "arch")}
            doc.update(failed_doc(ctx, exc, str(judged.get("summary") or "")))
            remember_after(ctx, state, doc, **fingerprint)
        raise
    if passed is not None and key:
        passed["run_dir"] = str(ctx.runner.run_dir) if ctx.runner.run_dir else None
        remember_after(ctx, state, passed, **fingerprint)


def _add_seconds(ctx: HostContext, seconds: float) -> None:
    """The memo lookup belongs to the smoke step's time (it runs before the step opens)."""
    if ctx.result.steps and ctx.result.steps[-1].name == "smoke":
        ctx.result.steps[-1].seconds += seconds
