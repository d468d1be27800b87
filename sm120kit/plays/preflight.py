"""The `preflight` operation: would an SGLang launch start on each host? Judged before it runs.

Per host: the facts (GPUs, memory in use, the processes holding it), one run of the stdlib
probe `remote/preflight_probe.py` against the serving env (--python, else the recipe's serving
stack env, else, for a recipe without a stack, its managed build env), which also runs
sglang's own argument resolution in that env (remote/lib/in_target/server_args.py), then
the verdicts of sm120kit/preflight/verdicts.py. Any failed check fails the host, with one
line per failed check.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any

from ..engines import check_name, engine_named
from ..errors import HostFailed, RecipeError, Sm120Error
from ..facts import gather
from ..inventory.host import Host
from ..packages.stack import catalogues
from ..preflight import vllm_checks
from ..preflight.launch import Launch, check_engine, for_engine
from ..preflight.verdicts import judge, probe_request
from ..python_choice import serving_lock
from ..recipes.select import host_engine
from ..recipes.target_arch import TargetArch
from ..remote.lib.cudaarch import parse_cc
from ..remote.preflight_probe import read_config
from ..runner.pool import HostContext, HostOp
from ..state import ProvisionState
from .plan import PlanOptions, prepare
from .smoke import choose_arch, managed_python, normalize_cc
from .stack import env_path as stack_env_path

#: Seconds for the probe: the env's interpreter lists its distributions, fatbin headers are read.
PROBE_TIMEOUT = 900.0


#: An engine's verdicts (sm120kit/engines.py `Engine.verdicts`) -> (its probe request, its
#: verdicts): sglang's own, and the table judge every other engine's launch is read by.
ENGINE_CHECKS: dict[str, tuple[Any, Any]] = {
    "sglang": (
        probe_request,
        lambda launch, facts, doc, cc, label, strict: judge(
            launch, facts, doc, cc, label, catalogues(), strict=strict
        ),
    ),
    "tables": (
        vllm_checks.probe_request,
        lambda launch, facts, doc, cc, label, strict: vllm_checks.judge(
            launch, facts, doc, cc, label, strict=strict
        ),
    ),
}


def serving_python(ctx: HostContext, opts: PlanOptions, python: str | None) -> tuple[str, str]:
    """(interpreter, label): --python, else the host's serving env: the recipe's serving
    stack env (``envs/stack-<lock>``, what `provision --stack` installs sglang into), and
    only for a recipe without a ``[stack]`` the build's managed env."""
    if python:
        return python, "--python"
    try:
        state = prepare(ctx, opts)
    except RecipeError as exc:
        raise RecipeError(f"{exc}; or pass --python PATH of the env sglang runs in") from None
    lock = serving_lock(state)
    if lock is not None:
        env = stack_env_path(state, lock)
        return posixpath.join(env, "bin", "python"), "serving stack env"
    py, label, _env = managed_python(state)
    return py, label


def check_flags(python: str | None, arch: str | None) -> None:
    """Raise Sm120Error (one line naming the flag) before any host is touched."""
    if python is not None and not str(python).strip():
        raise Sm120Error("--python is empty: give an interpreter path or a venv directory")
    if arch not in (None, "") and normalize_cc(arch) is None:
        raise Sm120Error(f"--arch {arch!r}: not a compute capability like 12.0")


def model_config_doc(path: str | None, launch: Launch) -> dict[str, Any] | None:
    """``--model-config PATH``, read on the controller: the config.json of a hub model id (a
    file, or a directory holding ``config.json``), as a JSON object; None without the flag.
    Raise Sm120Error (one line naming the flag and the file) when it is not usable, or when
    the launch's model is a local path (the host's own config.json is then what sglang reads)."""
    if path is None:
        return None
    if not str(path).strip():
        raise Sm120Error("--model-config is empty: give a config.json or a directory holding one")
    model = launch.model_path or ""
    if not model or model.startswith(("/", ".", "~")) or model.count("/") != 1:
        raise Sm120Error(
            f"--model-config is for a hub model id (org/name); --model-path {model!r} is not one "
            "(a local model's own config.json is read on the host)"
        )
    file = os.path.expanduser(str(path))
    if os.path.isdir(file):
        file = os.path.join(file, "config.json")
    doc, problem = read_config(file)
    if doc is None:
        raise Sm120Error(f"--model-config {file}: {problem}")
    return doc


def host_launch(ctx: HostContext, opts: PlanOptions, launch: Launch) -> Launch:
    """`launch` as this host's engine reads it: a bare ARGS launch is the engine of
    ``--engine``, else of the host's ``stack`` var, else the default (sglang); a launch naming
    its launcher is that launcher's engine. HostFailed (one line naming where the engine was
    chosen) for a name no engine has."""
    if not launch.bare:
        return launch
    name, where = host_engine(ctx.host, opts.engine)
    try:
        engine = check_name(name, where) or engine_named(None)
    except Sm120Error as exc:
        raise HostFailed(str(exc)) from None
    try:
        return for_engine(launch, engine.name)
    except Sm120Error as exc:
        raise HostFailed(f"{exc} (read as {engine.name}'s, {where})") from None


def run_preflight(
    ctx: HostContext,
    opts: PlanOptions,
    launch: Launch,
    python: str | None = None,
    arch: str | None = None,
    *,
    strict: bool = False,
    model_config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Judge `launch` on this host; record it (``preflight``, ``launch``, ``python``) and fail
    the host with one ``check: reason`` per failed check (with `strict`, also per unknown one).
    `model_config`: a hub model's config.json (``--model-config``) for sglang's resolution.
    A bare ARGS launch is first read as the host's engine's (`host_launch`). Returns the verdict, whose ``python`` is the serving env's interpreter as the host
    resolved it."""
    facts = gather(ctx)
    launch = host_launch(ctx, opts, launch)
    py, label = serving_python(ctx, opts, python)
    with ctx.step("preflight") as step:
        ctx.runner.progress.step(ctx.host.name, "preflight", "reading the serving env")
        chosen = preflight_arch(ctx.host, facts, arch, ctx.state)
        cc = parse_cc(chosen.cc) if chosen.cc else None
        # sglang's own resolution runs in the env; on a host without a GPU it is shown `cc`.
        gpus = (facts.get("gpu") or {}).get("gpus") or []
        memory = min((g.get("memory_mib") or 0 for g in gpus), default=0) or None
        ask, verdict_of = ENGINE_CHECKS[engine_named(launch.engine).verdicts]
        request = ask(launch, py, cc, resolve=True, memory_mib=memory)
        if model_config is not None:
            request["resolve"]["model_config"] = dict(model_config)
        doc = ctx.script("preflight_probe", request, timeout=PROBE_TIMEOUT)
        verdict = verdict_of(launch, facts, doc, cc, label, strict)
        verdict["arch_source"] = chosen.label
        verdict["python"] = doc.get("python") or py
        ctx.set(preflight=verdict, launch=launch.to_dict(), python=py, python_source=label)
        counts = {
            s: sum(c["status"] == s for c in verdict["checks"]) for s in ("pass", "fail", "unknown")
        }
        step.message = (
            f"{counts['pass']} passed, {counts['fail']} failed, {counts['unknown']} unknown"
        )
        if verdict["failed"]:
            raise HostFailed("; ".join(verdict["failed"]))
    return verdict


def stop_warm_op() -> HostOp:
    """`invoke preflight --stop-warm`: stop the host's warm resolution servers (this user's,
    remote/lib/warm.py ``stop_all``). Idempotent: "no warm server" when none runs."""

    def run(ctx: HostContext) -> None:
        with ctx.step("preflight.stop-warm") as step:
            doc = ctx.script("preflight_probe", {"stop_warm": True}, timeout=PROBE_TIMEOUT)
            if doc.get("error"):
                raise HostFailed(str(doc["error"]))
            stopped = [p for p in doc.get("stopped") or []]
            ctx.set(warm={"stopped": stopped, "stale": doc.get("stale") or 0})
            if stopped:
                pids = ", ".join(str(p) for p in stopped)
                step.message = f"stopped {len(stopped)} warm server(s) (pid {pids})"
            else:
                step.message = "no warm server"
            if doc.get("stale"):
                step.message += f"; removed {doc['stale']} stale socket(s)"

    return run


def preflight_arch(
    host: Host, facts: Mapping[str, Any], arch: str | None, state: ProvisionState | None
) -> TargetArch:
    """The arch preflight judges a launch for: `smoke_check.choose_arch` (the one rule of
    sm120kit/recipes/target_arch.py), with the recipe this run resolved for the host when it did
    (no ``--python``), so the stack, smoke and preflight agree. Pure."""
    return choose_arch(host, facts, arch, state.resolved if state is not None else None)


def preflight_op(
    opts: PlanOptions,
    launch: Launch,
    *,
    python: str | None = None,
    arch: str | None = None,
    strict: bool = False,
    model_config: str | None = None,
) -> HostOp:
    """`invoke preflight`: judge `launch` on each host from its facts and its serving env.

    `arch` (--arch) judges for that compute capability; without it, for the host's target arch
    (host var ``target_arch``, else its GPU, else the recipe's: sm120kit/recipes/target_arch.py).
    `strict` (--strict): an unknown check fails the host. `model_config` (--model-config): a
    hub model's config.json on the controller, read once before any host is touched.
    """
    check_flags(python, arch)
    check_engine(launch, opts.engine)
    config = model_config_doc(model_config, launch)

    def run(ctx: HostContext) -> None:
        run_preflight(ctx, opts, launch, python, arch, strict=strict, model_config=config)

    return run
