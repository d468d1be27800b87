"""Check results for people: smoke verdicts per package and check, serve-check evidence,
preflight verdicts."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .. import serve
from ..runner.results import RunResult
from ..smoke import report as smoke_report
from ..smoke import verdicts as smoke_check

_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "skip": "dim", "unknown": "magenta"}
_MAX_PROBLEM_LINES = 12


def render_smoke(console: Console, result: RunResult) -> None:
    """Per host: the env and arch, then one row per check (pass / warn / fail / skip)."""
    for name, host in result.hosts.items():
        d = host.data
        doc = d.get("smoke")
        if not isinstance(doc, dict):
            console.print(
                Text(f"{name}: {host.status}: {host.error or 'no smoke result'}", style="red")
            )
            continue
        torch = (doc.get("torch") or {}).get("version") or "no torch"
        arch = d.get("arch") or "no arch"
        title = (
            f"{name}: {d.get('python')} ({d.get('python_source')}), torch {torch}, "
            f"arch {arch} from {d.get('arch_source')}"
        )
        table = Table(title=title, title_justify="left", show_lines=False)
        for col in ("package", "check", "status", "reason"):
            table.add_column(col, overflow="fold")
        if doc.get("error"):
            table.add_row("*", "probe", "[red]fail[/]", Text(str(doc["error"])))
        torch_error = (doc.get("torch") or {}).get("error")
        if torch_error:
            table.add_row("torch", "import", "[yellow]warn[/]", Text(str(torch_error)))
        packages = d.get("packages") or {}
        stack = d.get("stack")
        for row_pkg, check, status, reason in smoke_check.rows(packages) + smoke_check.stack_rows(
            stack
        ):
            style = _STYLE.get(status, "red")
            table.add_row(row_pkg, check, f"[{style}]{status}[/]", Text(reason))
        console.print(table)
        console.print(Text(f"  checked: {smoke_check.checked_summary(packages, stack)}"))
        report = smoke_report.SmokeReport.from_json(doc)
        for pkg_name, pkg in report.packages.items():
            if not pkg.installed:
                continue
            line = smoke_report.torch_line(pkg)
            if line:
                console.print(Text(f"  {pkg_name} {pkg.version}: {line}"))
            for line in smoke_report.info_lines(pkg):
                console.print(Text(f"  {pkg_name}: {line}", style="cyan"))
            if packages.get(pkg_name, {}).get("status") != "fail":
                continue
            lines = smoke_report.problem_lines(pkg)
            for line in lines[:_MAX_PROBLEM_LINES]:
                console.print(Text(f"  {pkg_name}: {line}", style="dim"))
            if len(lines) > _MAX_PROBLEM_LINES:
                console.print(
                    Text(f"  {pkg_name}: ... {len(lines) - _MAX_PROBLEM_LINES} more", style="dim")
                )


def render_serve(console: Console, result: RunResult) -> None:
    """Per host: the verdict, reason, hint and evidence (processes, ports, GPU, stacks)."""
    for name, host in result.hosts.items():
        console.print(Text(name, style="bold"))
        doc = host.data.get("serve")
        if isinstance(doc, dict):
            console.print(render_serve_result(doc))
        else:
            console.print(Text(f"  {host.status}: {host.error}", style="red"))


def render_serve_result(result: dict[str, Any]) -> Any:
    """A rich renderable of a serve_check result, for people."""
    style = {
        serve.READY: "green",
        serve.WARMING_UP: "yellow",
        serve.HUNG: "red",
        serve.NOT_LISTENING: "red",
    }
    verdict = result.get("verdict", "?")
    parts: list[Any] = []
    head = Text()
    head.append(f"{result.get('url')}: ", style="bold")
    head.append(verdict.upper().replace("_", " "), style=f"bold {style.get(verdict, 'magenta')}")
    head.append(
        f" after {result.get('waited_s', 0):g}s, {result.get('attempts', 0)} poll(s)",
        style="dim",
    )
    parts.append(head)
    parts.append(Text(result.get("reason") or ""))
    if result.get("models"):
        parts.append(Text("models: " + ", ".join(result["models"])))
    if result.get("last_error") and not result.get("ready"):
        parts.append(Text(f"last poll: {result['last_error']}", style="dim"))
    if result.get("hint"):
        parts.append(Text("hint: " + result["hint"], style="cyan"))

    evidence = result.get("evidence") or {}
    processes = evidence.get("processes") or []
    if processes:
        table = Table(title="processes", title_justify="left", show_lines=False)
        for column in ("pid", "state", "cpu s", "cpu %", "thr", "rss MiB", "ports", "command"):
            table.add_column(column, overflow="fold")
        for proc in processes:
            for depth, row in [(0, proc)] + [(1, c) for c in proc.get("children") or []]:
                table.add_row(
                    ("  " * depth) + str(row.get("pid")),
                    str(row.get("state")) + (" (advancing)" if row.get("cpu_advancing") else ""),
                    _fmt(row.get("cpu_seconds")),
                    _fmt(row.get("cpu_percent")),
                    _fmt(row.get("threads")),
                    _fmt(row.get("rss_mib")),
                    ",".join(str(p) for p in row.get("listening") or []) or "-",
                    str(row.get("cmdline", ""))[:120],
                )
        parts.append(table)
    if evidence:
        ports = sorted({int(s["port"]) for s in evidence.get("listening_ports") or []})
        parts.append(Text("listening ports on the host: " + (", ".join(map(str, ports)) or "none")))
        gpus = evidence.get("gpu")
        if gpus:
            line = "; ".join(
                f"GPU{g.get('index')} {g.get('utilization_pct')}% {g.get('memory_used_mib')} MiB"
                for g in gpus
            )
            parts.append(Text("gpu: " + line))
        else:
            parts.append(Text(f"gpu: {evidence.get('gpu_note') or 'no data'}", style="dim"))
        if not evidence.get("py_spy_available"):
            parts.append(Text("py-spy: not found on the host", style="dim"))
        for proc in processes:
            for row in [proc] + list(proc.get("children") or []):
                if row.get("py_spy"):
                    parts.append(
                        Panel(
                            Text(row["py_spy"].rstrip()),
                            title=f"py-spy dump --pid {row['pid']}",
                            title_align="left",
                        )
                    )
    return Group(*parts)


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def render_serve_launch(console: Console, result: RunResult) -> None:
    """`serve-check --launch`: per host the preflight, then the launched server's verdict with
    its evidence and the tail of its log."""
    for name, host in result.hosts.items():
        _render_preflight_host(console, name, host)
        launched = host.data.get("launched")
        doc = host.data.get("serve")
        if isinstance(launched, dict):
            console.print(Text(f"launched pid {launched.get('pid')}, log {launched.get('log')}"))
        if isinstance(doc, dict):
            console.print(render_serve_result(doc))
            if doc.get("log_tail"):
                console.print(
                    Panel(Text(doc["log_tail"].rstrip()), title="server log", title_align="left")
                )


def render_stop_warm(console: Console, result: RunResult) -> None:
    """Per host: what `preflight --stop-warm` stopped ("no warm server" when nothing ran)."""
    for name, host in result.hosts.items():
        warm = host.data.get("warm")
        if not isinstance(warm, dict):
            console.print(Text(f"{name}: {host.status}: {host.error}", style="red"))
            continue
        stopped = warm.get("stopped") or []
        line = (
            f"stopped {len(stopped)} warm server(s) (pid {', '.join(map(str, stopped))})"
            if stopped
            else "no warm server"
        )
        if warm.get("stale"):
            line += f"; removed {warm['stale']} stale socket(s)"
        console.print(f"{name}: {line}")


def render_preflight(console: Console, result: RunResult) -> None:
    """Per host: every preflight check with its verdict and fix, then one line per failure."""
    for name, host in result.hosts.items():
        _render_preflight_host(console, name, host)


def _render_preflight_host(console: Console, name: str, host: Any) -> None:
    """One host's preflight: the GPU and attention choice, every check, then FAILED lines."""
    doc = host.data.get("preflight")
    head = Text(name, style="bold")
    if not isinstance(doc, dict):
        console.print(head)
        console.print(Text(f"  {host.status}: {host.error}", style="red"))
        return
    attention = doc.get("attention") or {}
    either = " or ".join(attention.get("candidates") or []) or "?"
    head.append(
        f"  GPU {doc.get('arch') or '?'}; attention prefill {attention.get('prefill') or either}"
        f", decode {attention.get('decode') or either} ({attention.get('how')})",
        style="dim",
    )
    console.print(head)
    table = Table(show_header=True, show_lines=False, box=None, pad_edge=False)
    for column in ("check", "status", "reason / fix"):
        table.add_column(column, overflow="fold")
    said: dict[str, str] = {}
    for item in doc.get("checks") or []:
        status = item.get("status", "?")
        reason = item.get("reason") or ""
        # One reason is printed once: a check whose reason an earlier row gave points there.
        first = said.setdefault(reason, item.get("check", "?")) if reason else None
        shown = reason if first in (None, item.get("check", "?")) else f"(as {first})"
        text = Text(shown)
        if item.get("fix") and status in ("fail", "warn"):
            text.append(f"\nfix: {item['fix']}", style="cyan")
        table.add_row(item.get("check", "?"), Text(status, style=_STYLE.get(status, "")), text)
    console.print(table)
    for line in failed_lines(doc):
        console.print(Text(line, style="red"))
    strict_failed = set(doc.get("strict_failed") or [])
    for item in doc.get("checks") or []:
        # Not a failure by default: said in the recap so a pass resting on it is not missed.
        if item.get("status") == "unknown" and item.get("check") not in strict_failed:
            line = f"{item.get('check', '?')}: {item.get('reason') or ''}"
            console.print(Text(f"UNKNOWN {line} (--strict fails it)", style="yellow"))


def failed_lines(doc: dict[str, Any]) -> list[str]:
    """One ``FAILED check`` line per failed check, with its fix: the reason is in the table
    just above (and in --json), so it is not printed again. An unknown check that --strict
    failed is a FAILED line too, with why it was unknown."""
    out = []
    for item in doc.get("checks") or []:
        if item.get("status") != "fail":
            continue
        fix = f": fix {item['fix']}" if item.get("fix") else ""
        out.append(f"FAILED {item.get('check', '?')}{fix}")
    strict_failed = set(doc.get("strict_failed") or [])
    out += [
        f"FAILED {item.get('check', '?')}: unknown (--strict): {item.get('reason') or ''}"
        for item in doc.get("checks") or []
        if item.get("status") == "unknown" and item.get("check") in strict_failed
    ]
    return out
