"""The `serve-check` operation: is a model server on each host ready, and if not, why.

It polls a server URL as the host sees it (sm120kit/serve.py) and records the verdict;
anything but "ready" fails the host with the verdict and reason.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from .. import serve
from ..errors import HostFailed
from ..results import RunResult
from ..runner import HostContext, HostOp


def serve_check_op(
    url: str, timeout: float, *, pid: int | None = None, process_match: str | None = None
) -> HostOp:
    """`invoke serve-check`: wait for `url` (as each host sees it) to be ready, or say why not.

    `pid` / `process_match` name the server process when nothing listens on the port yet
    (otherwise sglang/vllm/uvicorn-like command lines are looked for).
    """
    serve.check_arguments(url, timeout)

    def run(ctx: HostContext) -> None:
        with ctx.step("serve-check") as step:
            ctx.runner.progress.step(ctx.host.name, "serve-check", f"polling {url}")
            result = serve.serve_check(ctx.conn, url, timeout, pid=pid, process_match=process_match)
            ctx.set(serve=result)
            step.message = f"{result['verdict']}: {result['reason']}"
            if not result.get("ready"):
                raise HostFailed(f"{result['verdict']}: {result['reason']}")

    return run


def render_serve(console: Console, result: RunResult) -> None:
    """Per host: the verdict, reason, hint and evidence (processes, ports, GPU, stacks)."""
    for name, host in result.hosts.items():
        console.print(Text(name, style="bold"))
        doc = host.data.get("serve")
        if isinstance(doc, dict):
            console.print(serve.render_serve_result(doc))
        else:
            console.print(Text(f"  {host.status}: {host.error}", style="red"))
