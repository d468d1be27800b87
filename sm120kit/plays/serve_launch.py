"""`serve-check --launch`: preflight a launch, start it on each host, then watch it as serve-check.

Per host: the launch as the host's engine reads it (a bare ARGS launch: ``--engine``, else the
host's ``stack`` var), the preflight verdicts (sm120kit/plays/preflight.py: a failed check
fails the host and nothing starts); then `remote/serve_launch.py` starts the server detached
with the serving env's interpreter and the engine's `Engine.serve_argv` (``<env python> -m
sglang.launch_server ARGS``, ``<env python> -m vllm.entrypoints.cli.main serve ARGS``), its
output in
``<work_root>/logs/serve-<port>-<time>.log``; then serve-check polls the launch's own URL
(``--host``/``--port``; 0.0.0.0 and :: are polled on loopback) with the new pid as the server
process. Anything but ready fails the host with the verdict, and the log's tail is kept. A
server that is still starting at the deadline is left running.
"""

from __future__ import annotations

import posixpath
import time
from typing import Any

from .. import serve
from ..engines import engine_named
from ..errors import HostFailed
from ..paths import HostPaths
from ..preflight.launch import Launch, check_engine, server_args
from ..runner.pool import HostContext, HostOp
from .plan import PlanOptions
from .preflight import check_flags, host_launch, model_config_doc, run_preflight

#: Bytes of the server's log kept when it is not ready.
LOG_TAIL_BYTES = 4000


def launch_url(launch: Launch) -> str:
    """The URL the launched server answers on, as the host sees it."""
    host = launch.host
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host in ("::", "[::]"):
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{launch.port}"


def server_argv(python: str, launch: Launch) -> list[str]:
    """The env's interpreter running the launch's engine's launcher (`Engine.serve_argv`) with
    the launch's own arguments."""
    engine = engine_named(launch.engine)
    return [python, *engine.serve_argv, *server_args(list(launch.words), engine.name)]


def serve_launch_op(
    opts: PlanOptions,
    launch: Launch,
    timeout: float,
    *,
    python: str | None = None,
    arch: str | None = None,
    strict: bool = False,
    model_config: str | None = None,
) -> HostOp:
    """Preflight `launch` (`strict`, `model_config`: as `preflight_op`), start it, wait up to
    `timeout` seconds for it to be ready."""
    check_flags(python, arch)
    check_engine(launch, opts.engine)
    config = model_config_doc(model_config, launch)
    serve.check_arguments(launch_url(launch), timeout)

    def run(ctx: HostContext) -> None:
        own = host_launch(ctx, opts, launch)  # a bare ARGS launch: this host's engine's
        url = launch_url(own)
        verdict = run_preflight(ctx, opts, own, python, arch, strict=strict, model_config=config)
        facts = ctx.facts or {}
        log = posixpath.join(
            HostPaths(facts.get("work_root") or ctx.host.work_root).logs,
            f"serve-{own.port}-{time.strftime('%Y%m%d-%H%M%S')}.log",
        )
        argv = server_argv(verdict["python"], own)
        with ctx.step("launch") as step:
            started = ctx.script("serve_launch", {"argv": argv, "log": log}, timeout=60)
            if not started.get("started"):
                raise HostFailed(f"could not start the server: {started.get('error')}")
            step.message = f"pid {started['pid']}, log {started['log']}"
            ctx.set(launched={"argv": argv, "pid": started["pid"], "log": started["log"]})
        with ctx.step("serve-check") as step:
            ctx.runner.progress.step(ctx.host.name, "serve-check", f"polling {url}")
            result = serve.serve_check(ctx, url, timeout, pid=int(started["pid"]))
            if not result.get("ready"):
                result["log_tail"] = _tail(ctx, started["log"])
            ctx.set(serve=result)
            step.message = f"{result['verdict']}: {result['reason']}"
            if not result.get("ready"):
                raise HostFailed(
                    f"{result['verdict']}: {result['reason']} (server log: {started['log']})"
                )

    return run


def _tail(ctx: HostContext, log: str) -> Any:
    doc = ctx.script("serve_launch", {"mode": "tail", "log": log, "bytes": LOG_TAIL_BYTES})
    return doc.get("tail")
