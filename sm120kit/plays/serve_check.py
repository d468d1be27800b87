"""The `serve-check` operation: is a model server on each host ready, and if not, why.

It polls a server URL as the host sees it (sm120kit/serve.py) and records the verdict;
anything but "ready" fails the host with the verdict and reason.
"""

from __future__ import annotations

from .. import serve
from ..errors import HostFailed
from ..runner.pool import HostContext, HostOp


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
            result = serve.serve_check(ctx, url, timeout, pid=pid, process_match=process_match)
            ctx.set(serve=result)
            step.message = f"{result['verdict']}: {result['reason']}"
            if not result.get("ready"):
                raise HostFailed(f"{result['verdict']}: {result['reason']}")

    return run
