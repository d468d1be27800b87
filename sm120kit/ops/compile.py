"""The build itself, run on a wheel-cache miss: ``remote/build_wheel.py`` in a throwaway copy
of the patched tree (``build/<pkg>/work``, log under ``work_root/logs``), with the compile
cache, the build record's provenance, and a retry with halved parallelism after an OOM kill.
A build is planned as Steps (`plan_build`, through the pure `build_steps`): plan shows them,
a cache miss runs them.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
from collections.abc import Callable
from typing import Any

from ..builds import cmake_config, compile_cache
from ..builds.cmake_config import driver_link, require_arch
from ..builds.inputs import build_env
from ..builds.knobs import Knobs, lowered_for_oom
from ..cache.request import BuiltWheel
from ..cache.resolve import host_store_specs
from ..cache.wheels import cache_for
from ..errors import HostFailed
from ..inventory.host import host_file
from ..remote.lib.frontend import build_command
from ..runner.build_progress import poll_progress
from ..runner.host_context import HostContext
from ..runner.step_run import run_steps
from ..state import ProvisionState
from ..steps import Step


def link_driver(ctx: HostContext, knobs: Knobs) -> None:
    """Make the ``libcuda.so`` link that the build's LIBRARY_PATH names (after the tree copy,
    which replaces the directory it lives in; a build plans it as its ``link`` Step, `build_steps`)."""
    link = driver_link(knobs)
    if link is not None:
        directory, library = link
        target = posixpath.join(directory, "libcuda.so")
        ctx.run(
            f"mkdir -p {shlex.quote(directory)} && "
            f"ln -sfn {shlex.quote(library)} {shlex.quote(target)}",
            what="link libcuda.so for -lcuda",
        )


#: A build may take hours on a small host (docs/stack-facts.md section 5); past this it is killed.
BUILD_TIMEOUT = 8 * 3600


#: Rebuilds after an OOM kill, each with half the jobs (or threads); host var ``oom_retries``.
DEFAULT_OOM_RETRIES = 1


def _build_paths(state: ProvisionState, name: str, key: str) -> dict[str, str]:
    """Where a build of `name` works, writes its wheel, its progress and its log on the host."""
    bdir = state.paths.build(name)
    return {
        "bdir": bdir,
        "work": posixpath.join(bdir, "work"),
        "out": posixpath.join(bdir, "out"),
        "progress": posixpath.join(bdir, "progress.json"),
        "log": posixpath.join(state.paths.logs, f"build-{name}-{key[:12]}.log"),
    }


def build_steps(
    where: dict[str, str],
    tree: str,
    pip_args: list[str],
    link: tuple[str, str] | None,
    args: dict[str, Any],
) -> list[Step]:
    """One build as Steps, a pure function: a fresh copy of the patched `tree` to build in, the
    ``libcuda.so`` link its LIBRARY_PATH names (`link`: directory, library; after the copy,
    which replaces the directory it lives in), private copies of the dependency trees (a
    full build writes into some of them: dlpack's ``bin/``, mscclpp's ``python/``; the stored
    trees stay as verified), then build_wheel.py with `args` and the rewritten `pip_args`."""
    work = where["work"]
    steps = [
        Step("remove", path=work),
        Step("remove", path=where["out"]),
        Step("remove", path=where["progress"]),
        Step("mkdir", path=where["bdir"]),
        Step("copy", src=tree, dest=work),
    ]
    if link is not None:
        directory, library = link
        steps += [
            Step("mkdir", path=directory),
            Step("link", target=library, path=posixpath.join(directory, "libcuda.so")),
        ]
    prefix = "-Ccmake.define.FETCHCONTENT_SOURCE_DIR_"
    rewritten = []
    for arg in pip_args:
        if arg.startswith(prefix):
            define, _, path = arg.partition("=")
            copy = posixpath.join(work, ".sm120kit-deps", posixpath.basename(path))
            steps.append(Step("copy", src=path, dest=copy))
            arg = f"{define}={copy}"
        rewritten.append(arg)
    return [*steps, Step("build", args={**args, "pip_args": rewritten})]


def plan_build(
    state: ProvisionState,
    name: str,
    tree: str,
    knobs: Knobs,
    key: str,
    cache_spec: dict[str, Any] | None = None,
) -> list[Step]:
    """The Steps of one build of `name` from `tree` on this host (`build_steps`): what plan
    shows and what a wheel-cache miss runs (`key` may be "" in plan, before the env exists)."""

    where = _build_paths(state, name, key)
    args: dict[str, Any] = {
        "src": where["work"],
        "python": state.env.python if state.env is not None else "python",
        "env": build_env(state, knobs),
        "out_dir": where["out"],
        "log": where["log"],
        "progress": where["progress"],
        "front_end": "pip",
        "timeout": float(BUILD_TIMEOUT),
        "provenance": provenance_fields(state, name, key),
    }
    if cache_spec is not None:
        args["compile_cache"] = cache_spec
    return build_steps(where, tree, list(knobs.pip_args), driver_link(knobs), args)


def _build_once(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    tree: str,
    knobs: Knobs,
    cache_spec: dict[str, Any] | None,
    key: str,
    ran: list[Step],
) -> dict[str, Any]:
    """One run of build_wheel.py in a fresh copy of `tree` (`plan_build`'s Steps, appended to
    `ran`): its JSON result."""
    assert state.env is not None and state.toolkit is not None
    steps = plan_build(state, name, tree, knobs, key, cache_spec)
    *prepare, build = steps
    ran += steps
    run_steps(ctx, prepare, failed=lambda _s, doc: str(doc.get("error")))
    args = dict(build["args"])
    timeout = float(args["timeout"])
    cuda_bin = posixpath.join(state.toolkit.cuda_home, "bin")
    ctx.log.info("build %s: %s", name, " ".join(build_command(args, args["out_dir"])))
    with poll_progress(ctx, f"wheel:{name}", str(args["progress"])):
        try:
            doc = ctx.script("build_wheel", args, path=[cuda_bin], timeout=timeout + 300)
        except HostFailed as exc:
            raise HostFailed(f"{name}: the build script failed: {exc}") from None
    if doc.get("compile_cache") is not None:
        state.packages.setdefault(name, {})["compile_cache"] = _cache_counts(doc["compile_cache"])
    return doc


def make_builder(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    tree: str,
    knobs: Knobs,
    key: str,
    ran: list[Step] | None = None,
    *,
    cmake_checked: bool,
) -> Callable[[], BuiltWheel]:
    """The closure `WheelCache.obtain` runs on a miss: build_wheel.py in a fresh copy of `tree`
    (the Steps that ran are appended to `ran`: one build, or more after an OOM kill). With
    `cmake_checked` (`cmake_config.cmake_checked`, asked once by the play) a real configure
    first checks that the compile commands carry code for the recipe's arch."""
    done: list[Step] = [] if ran is None else ran

    def build() -> BuiltWheel:
        where = _build_paths(state, name, key)
        work, log = where["work"], where["log"]

        if cmake_checked:
            # A few seconds of configure before hours of compiling: the compile commands
            # must carry code for the recipe's arch.
            configured = configure_targets(ctx, state, name, tree, knobs, done)
            pkg = state.resolved.packages[name]
            require_arch(pkg, configured.get("targets") or {}, list(state.arch_list))
        cache_spec = compile_cache_spec(ctx, state, name)
        retries = int(state.host.vars.get("oom_retries", DEFAULT_OOM_RETRIES))
        now = knobs
        while True:
            doc = _build_once(ctx, state, name, tree, now, cache_spec, key, done)
            failure = doc.get("failure") or {}
            lowered = lowered_for_oom(now) if failure.get("kind") == "oom" and retries else None
            if doc.get("ok") or lowered is None:
                break
            retries -= 1
            now, change = lowered
            # The failed run's log stays beside the next one as <log>.1; with the compile
            # cache, every unit that finished is a hit the second time.
            ctx.log.warning("build %s was OOM-killed; retrying with %s", name, change)
            ctx.runner.progress.step(ctx.host.name, f"wheel:{name}", f"OOM; retrying: {change}")
            state.packages.setdefault(name, {}).setdefault("oom_retries", []).append(change)
        if not doc.get("ok"):
            _fetch_log(ctx, log, name)
            tail = [ln.strip() for ln in doc.get("log_tail") or [] if ln.strip()]
            ctx.log.error("build %s failed; log tail:\n%s", name, "\n".join(tail))
            last = last_error_line(tail) or doc.get("error") or ""
            retried = state.packages.get(name, {}).get("oom_retries")
            raise HostFailed(
                f"{name}: build failed ({failure.get('kind', 'error')}): "
                f"{failure.get('advice') or doc.get('error')}"
                + (f" (after an OOM retry with {'; '.join(retried)})" if retried else "")
                + f"; log {log} on {ctx.host.name}, last line: {last}"
            )
        ctx.run(f"rm -rf {_q(work)}", check=False)
        return BuiltWheel(
            path=str(doc["wheel"]),
            sha256=str(doc["sha256"]),
            seconds=float(doc.get("seconds") or 0.0),
            log=log,
        )

    return build


def configure_targets(
    ctx: HostContext,
    state: ProvisionState,
    name: str,
    tree: str,
    knobs: Knobs,
    ran: list[Step] | None = None,
) -> dict[str, Any]:
    """Run `cmake_config.configure_steps` on the host and return ``{"targets": {target: {"units", "sass",
    "ptx"}}, "seconds"}``; the Steps are appended to `ran` (what the step shows it ran)."""
    assert state.toolkit is not None and state.env is not None
    steps = cmake_config.configure_steps(state, knobs, tree)
    if ran is not None:
        ran += steps

    def failed(_step: Step, doc: dict[str, Any]) -> str:
        ctx.log.error("configure of %s failed:\n%s", name, "\n".join(doc.get("log_tail") or []))
        return f"{name}: configuring {tree} failed: {doc.get('error') or 'no error reported'}"

    try:
        return run_steps(ctx, steps, failed=failed, timeout=1200)
    except HostFailed as exc:
        if str(exc).startswith(f"{name}: configuring "):
            raise
        raise HostFailed(f"{name}: configuring {tree} failed: {exc}") from None


def compile_cache_spec(ctx: HostContext, state: ProvisionState, name: str) -> dict[str, Any] | None:
    """build_wheel.py's ``compile_cache`` argument for `name` on this host, or None when the
    host var or the package's knob turns it off. S3 credentials for the team store go into
    a file only the host's user can read (the script deletes it), never into the arguments."""
    if not compile_cache.enabled_on_host(state.host.vars):
        return None
    if not compile_cache.knob_enabled(name, state.resolved.packages[name].knobs):
        return None
    assert state.env is not None
    stores = host_store_specs(cache_for(ctx.runner).config, ctx.host)
    spec = compile_cache.host_spec(
        state.host.vars,
        state.paths.work_root,
        state.env.path,
        name,
        stores,
        cmake=state.resolved.packages[name].descriptor.cmake,
    )
    if "s3" in spec:
        profile = next((s.get("profile") for s in stores if s.get("type") == "s3"), None)
        creds = compile_cache.s3_credentials(profile)
        if creds:
            path = posixpath.join(state.paths.tmp, f"compile-cache-{name}-{os.getpid()}.json")
            ctx.run(
                f"umask 077 && mkdir -p {_q(state.paths.tmp)} && cat > {_q(path)}",
                stdin=json.dumps(creds),
                check=False,
            )
            spec["secrets"] = path
    return spec


def _cache_counts(doc: dict[str, Any]) -> dict[str, Any]:
    """The JSON's ``compile_cache`` block: hits and misses first, then the detail."""
    if not doc.get("enabled"):
        return {"enabled": False, "reason": doc.get("reason")}
    keep = ("hits", "misses", "hits_by_kind", "misses_by_kind", "compile_requests", "errors")
    out: dict[str, Any] = {k: doc[k] for k in keep if k in doc}
    out.update(
        {
            k: doc[k]
            for k in ("tool", "version", "store", "levels", "team_store", "warning")
            if doc.get(k)
        }
    )
    return out


def provenance_fields(state: ProvisionState, name: str, key: str) -> dict[str, Any]:
    """What only the controller knows for the wheel's build record (``sm120kit-build.json``,
    written by build_wheel.py, which adds the torch, nvcc and device code it measures)."""
    record = state.packages.get(name) or {}
    pkg = state.resolved.packages[name]
    return {
        "package": name,
        "recipe": state.resolved.recipe.name,
        "cache_key": key,
        "arch_list": list(state.arch_list),
        "source": {**dict(pkg.source), "digest": record.get("source_digest")},
        "patches": list(record.get("patches") or []),
        "recipe_torch": {
            "version": state.resolved.torch.version,
            "cuda": state.resolved.torch.cuda,
            "pin": pkg.torch or None,
        },
    }


#: Lines pip and the front end wrap a failed build in: they never say what went wrong.
_WRAPPER = re.compile(
    r"^(\[notice\]|# sm120kit|ERROR: Failed|Failed to build|error: subprocess-exited|note: |"
    r"full command: |cwd: |[×│╰]|exit code: |Building wheel for .* finished)"
)


_ERRORISH = re.compile(r"error|FAILED|Killed|fatal|Traceback|No such file", re.IGNORECASE)


def last_error_line(tail: list[str]) -> str:
    """The log line that best says why a build failed: the last error-like line that is not
    pip's wrapping, else the last line that is not (at most 200 characters)."""
    useful = [ln for ln in tail if ln and not _WRAPPER.match(ln)]
    for line in reversed(useful):
        if _ERRORISH.search(line):
            return line[:200]
    return useful[-1][:200] if useful else ""


def _fetch_log(ctx: HostContext, log: str, name: str) -> None:
    """A failed build's full log, copied beside the run's host log on the controller."""
    run_dir = ctx.runner.run_dir
    if run_dir is None:
        return
    try:
        ctx.get(log, str(host_file(run_dir, ctx.host.name, f"-build-{name}.log")))
    except Exception as exc:  # the error message already names the log on the host
        ctx.log.warning("could not copy %s: %s", log, exc)


def _q(text: str) -> str:
    return shlex.quote(text)


__all__ = [
    "BUILD_TIMEOUT",
    "DEFAULT_OOM_RETRIES",
    "build_steps",
    "compile_cache_spec",
    "last_error_line",
    "make_builder",
    "plan_build",
    "provenance_fields",
]
