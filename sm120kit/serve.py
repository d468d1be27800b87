"""serve-check: wait for an inference server on a host to answer, and explain when it does not.

The URL is as the host sees it (usually http://127.0.0.1:PORT), so every probe runs on the
host through the stdlib script `remote/serve_probe.py`: cheap polls of /health and
/v1/models until ready or the deadline, then one diagnosis that gathers the evidence which
tells "still warming up" from "hung after weight loading" (process state, CPU time sampled
twice, listening ports, GPU utilisation, py-spy stacks).
"""

from __future__ import annotations

import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_delay,
    wait_exponential,
)

from .errors import Sm120Error

if TYPE_CHECKING:
    from .runner.host_context import HostContext

READY = "ready"
WARMING_UP = "warming_up"
HUNG = "hung"
NOT_LISTENING = "not_listening"
#: The port is open but its process is invisible (another user's): no CPU evidence to judge.
UNKNOWN = "unknown"

#: docs/stack-facts.md section 6: loads weights, then no port, 0% CPU and GPU.
HANG_HINT = (
    "a server that loads its weights and then sits idle is hung, not warming up; on "
    "multi-GPU consumer Blackwell (SM120) boards the usual cause is custom all-reduce / P2P: "
    "relaunch with --disable-custom-all-reduce and NCCL_P2P_DISABLE=1; the py-spy stacks of "
    "every rank show where each one waits"
)
EXITED_HINT = "the server is not running: its log holds the error it exited with"

# Seconds allowed on top of the probe's own HTTP timeouts for starting Python over SSH.
_COMMAND_SLACK = 30.0


def serve_check(
    ctx: HostContext,
    url: str,
    timeout: float,
    interval: float = 2.0,
    *,
    request_timeout: float = 3.0,
    pid: int | None = None,
    process_match: str | None = None,
    py_spy: bool = True,
    py_spy_path: str | None = None,
    nvidia_smi: str | None = None,
    sample_s: float = 1.0,
) -> dict[str, Any]:
    """Poll `url` on the host until /health and /v1/models answer, or `timeout` seconds pass.

    Polls back off exponentially up to `interval` seconds. On the deadline the host is
    diagnosed once and the result carries a verdict (`ready`, `warming_up`, `hung`,
    `not_listening`, or `unknown` when the port's process is another user's) with a
    one-line reason and the evidence. `pid` / `process_match` (a regex on the command line)
    name the server process when nothing listens on the port yet; without them, command
    lines that look like sglang / vLLM / uvicorn launches are used.
    Raises Sm120Error for a bad URL or a non-positive timeout/interval; HostUnreachable and
    HostFailed come from the host. `waited_s` is the polling time, before the diagnosis.
    """
    _validate(url, timeout, interval, request_timeout)

    start = time.monotonic()
    deadline = start + timeout
    backoff = wait_exponential(multiplier=0.5, min=min(0.25, interval), max=interval)

    def wait(state: RetryCallState) -> float:
        # Never sleep past the deadline: the last poll happens at it, not after it.
        return max(0.0, min(backoff(state), deadline - time.monotonic()))

    attempts = 0

    def attempt() -> dict[str, Any]:
        nonlocal attempts
        attempts += 1
        return poll(ctx, url, request_timeout)

    retrying = Retrying(
        stop=stop_after_delay(timeout),
        wait=wait,
        retry=retry_if_result(lambda r: not r.get("ready")),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
    )
    last = retrying(attempt)
    waited = round(time.monotonic() - start, 2)
    if last and last.get("ready"):
        return _result(url, last, waited, attempts, READY, _ready_reason(last, waited), None, None)

    diag = diagnose(
        ctx,
        url,
        request_timeout=request_timeout,
        pid=pid,
        process_match=process_match,
        py_spy=py_spy,
        py_spy_path=py_spy_path,
        nvidia_smi=nvidia_smi,
        sample_s=sample_s,
    )
    verdict, reason, hint = judge(diag)
    final_poll = diag.get("poll") or last or {}
    if verdict != READY:
        # What the polls saw up to the deadline, not the diagnosis' own extra request.
        final_poll = dict(final_poll, error=(last or final_poll).get("error"))
    evidence = {k: v for k, v in diag.items() if k not in ("mode", "url", "poll")}
    return _result(url, final_poll, waited, attempts, verdict, reason, hint, evidence)


def check_arguments(url: str, timeout: float) -> None:
    """Raise Sm120Error (one line naming --url or --timeout) before any host is touched."""
    _validate(url, timeout, 2.0, 3.0)


def poll(ctx: HostContext, url: str, request_timeout: float = 3.0) -> dict[str, Any]:
    """One GET of /health and /v1/models on the host (the probe's raw "poll" JSON)."""
    return ctx.script(
        "serve_probe",
        {"mode": "poll", "url": url, "request_timeout": request_timeout},
        timeout=2 * request_timeout + _COMMAND_SLACK,
    )


def diagnose(
    ctx: HostContext,
    url: str,
    *,
    request_timeout: float = 3.0,
    pid: int | None = None,
    process_match: str | None = None,
    py_spy: bool = True,
    py_spy_path: str | None = None,
    nvidia_smi: str | None = None,
    sample_s: float = 1.0,
) -> dict[str, Any]:
    """The probe's raw "diagnose" JSON: one poll plus processes, ports, GPU and stacks."""
    args: dict[str, Any] = {
        "mode": "diagnose",
        "url": url,
        "request_timeout": request_timeout,
        "py_spy": py_spy,
        "sample_s": sample_s,
    }
    optional = {
        "pid": pid,
        "process_match": process_match,
        "py_spy_path": py_spy_path,
        "nvidia_smi": nvidia_smi,
    }
    args.update({k: v for k, v in optional.items() if v is not None})
    # py-spy may run once per rank (20 s cap each) after a 1 s CPU sample and a poll.
    budget = 2 * request_timeout + sample_s + 20 * 17 + 20 + _COMMAND_SLACK
    return ctx.script("serve_probe", args, timeout=budget)


def judge(diag: dict[str, Any]) -> tuple[str, str, str | None]:
    """Verdict, one-line reason and an optional hint from a diagnosis."""
    poll_doc = diag.get("poll") or {}
    port = diag.get("port")
    if poll_doc.get("ready"):
        return READY, "answers /health and /v1/models (ready at the deadline)", None
    answer = _describe_answer(poll_doc, port, bool(diag.get("port_open")))
    processes = diag.get("processes") or []
    alive = [p for p in processes if p.get("state") not in ("gone", "Z", "X")]
    if not alive:
        if diag.get("port_open") and not diag.get("port_owner_visible"):
            return (
                UNKNOWN,
                f"{answer}; the process holding port {port} is not visible to this user "
                "(another user's process: rerun as that user or root)",
                None,
            )
        if diag.get("missing_pids"):
            gone = ", ".join(str(p) for p in diag["missing_pids"])
            return NOT_LISTENING, f"{answer}; server process {gone} has exited", EXITED_HINT
        if processes:
            proc = processes[0]
            return (
                NOT_LISTENING,
                f"{answer}; server process {proc['pid']} has exited (zombie)",
                EXITED_HINT,
            )
        looked = f" (looked for: {diag['found_by']})" if diag.get("found_by") else ""
        return (
            NOT_LISTENING,
            f"{answer} and no server process is running (never started or exited){looked}",
            EXITED_HINT,
        )

    main = alive[0]
    tree = [p for root in alive for p in [root] + list(root.get("children") or [])]
    tree = [p for p in tree if p.get("state") not in ("gone", "Z", "X")]
    ports = sorted({port_ for p in tree for port_ in p.get("listening") or []} - {port})
    where = ""
    if ports and not diag.get("port_open"):
        listed = ", ".join(str(p) for p in ports)
        where = f"; it listens on {listed}, not {port} (wrong port in the URL or --port?)"
    who = f"pid {main['pid']} (up {_age(main.get('age_s'))})"
    busy = [p for p in tree if p.get("cpu_advancing")]
    if busy:
        pct = sum(float(p.get("cpu_percent") or 0) for p in busy)
        return WARMING_UP, f"{who} is working (CPU {pct:.0f}% of a core), {answer}{where}", None

    blocked = [p for p in tree if p.get("state") == "D"]
    notes = [_gpu_summary(diag.get("gpu"))]
    held = sum(int(p.get("gpu_memory_mib") or 0) for p in tree)
    if held:
        notes.append(f"{held} MiB of GPU memory held (weights loaded)")
    if blocked:
        notes.append(
            "in uninterruptible sleep (D): pid " + ", ".join(str(p["pid"]) for p in blocked)
        )
    sample = diag.get("sample_s") or 1.0
    reason = (
        f"{who} is alive but idle (CPU time not advancing over {sample:g}s), {answer}, "
        + ", ".join(n for n in notes if n)
        + where
    )
    hint = HANG_HINT
    gpus = diag.get("gpu")
    if gpus is not None and len(gpus) >= 2:
        hint = f"{len(gpus)} GPUs here: " + hint
    if not diag.get("py_spy_available"):
        hint += " (py-spy not found on the host: pip install py-spy, then rerun)"
    return HUNG, reason, hint


def _validate(url: str, timeout: float, interval: float, request_timeout: float) -> None:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise Sm120Error(f"--url {url!r}: {exc}; expected http://HOST:PORT") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Sm120Error(f"--url {url!r}: expected http://HOST:PORT as the host sees it")
    try:
        _ = parts.port  # raises ValueError when not a number
    except ValueError:
        raise Sm120Error(f"--url {url!r}: the port is not a number") from None
    if timeout <= 0:
        raise Sm120Error(f"--timeout {timeout}: must be more than 0 seconds")
    if interval <= 0 or request_timeout <= 0:
        raise Sm120Error(
            f"serve-check interval {interval} / request timeout {request_timeout}: must be > 0"
        )


def _result(
    url: str,
    poll_doc: dict[str, Any],
    waited: float,
    attempts: int,
    verdict: str,
    reason: str,
    hint: str | None,
    evidence: dict[str, Any] | None,
) -> dict[str, Any]:
    health = poll_doc.get("health") or {}
    models = poll_doc.get("models") or {}
    return {
        "url": url,
        "ready": verdict == READY,
        "verdict": verdict,
        "reason": reason,
        "hint": hint,
        "waited_s": waited,
        "seconds": waited,
        "attempts": attempts,
        "last_error": poll_doc.get("error"),
        "health": health.get("status"),
        "models": models.get("ids"),
        "evidence": evidence,
    }


def _ready_reason(poll_doc: dict[str, Any], waited: float) -> str:
    ids = (poll_doc.get("models") or {}).get("ids") or []
    return f"ready after {waited:g}s: /v1/models lists {len(ids)} model(s)"


def _describe_answer(poll_doc: dict[str, Any], port: Any, port_open: bool) -> str:
    health = poll_doc.get("health") or {}
    error = health.get("error")
    if error == "refused" or (error is None and not port_open and not health.get("status")):
        return f"nothing listens on port {port}"
    if error == "timeout":
        return f"port {port} accepts connections but GET /health times out"
    if error == "connect_timeout":
        return f"connecting to port {port} times out (firewall, or the wrong address?)"
    if error == "reset":
        return f"port {port} accepts connections but drops them unanswered"
    if error == "http":
        return f"GET /health answers HTTP {health.get('status')}"
    models = poll_doc.get("models") or {}
    if health.get("status") in (200, 404) and models:
        return f"/health answers but /v1/models does not ({models.get('detail') or 'no list'})"
    return f"GET /health failed: {health.get('detail') or poll_doc.get('error')}"


def _gpu_summary(gpus: list[dict[str, Any]] | None) -> str:
    if gpus is None:
        return "no GPU data (no nvidia-smi)"
    if not gpus:
        return "nvidia-smi lists no GPU"
    utils = [g.get("utilization_pct") for g in gpus]
    if all(u == 0 for u in utils):
        return f"GPU 0% on all {len(gpus)}"
    return "GPU " + "/".join(f"{u}%" for u in utils)


def _age(seconds: Any) -> str:
    if seconds is None:
        return "?"
    seconds = float(seconds)
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f} min"
