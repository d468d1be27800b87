"""A run's results for people: the Ansible-like recap and per-task tables (rich, to a console).

Also the inventory table and the ``--explain`` tables a build or plan prints once it ran.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..builds import compile_cache
from ..facts import cuda_summary, driver_summary, gb, gpu_summary
from ..runner.results import RunResult, StepResult
from .console import redacting
from .progress import STATUS_STYLE
from .stack import stack_table


def recap(console: Console, result: RunResult) -> None:
    """PLAY RECAP-style lines: per host ok/changed/failed/unreachable/skipped, then the run dir."""
    console.print()
    title = f"[bold]RECAP[/] {result.task}" + (" (check mode)" if result.check_mode else "")
    if result.interrupted:
        title += f" [bold red](interrupted by {result.interrupted})[/]"
    console.print(title)
    width = max((len(n) for n in result.hosts), default=4)
    keys = ["ok", "changed", "unreachable", "failed", "skipped"]
    if result.interrupted:
        keys.append("interrupted")
    for name, host in result.hosts.items():
        c = host.counts()
        line = Text(f"{name:<{width}} : ", style=STATUS_STYLE.get(host.status, "red"))
        for key in keys:
            style = STATUS_STYLE.get(key, "red") if c[key] else "dim"
            line.append(f"{key}={c[key]}  ", style=style)
        console.print(line)
        for note in host.data.get("lock_notes") or []:
            console.print(Text(f"{'':<{width}}   lock: {note}", style="yellow"))
        if host.error:
            console.print(Text(f"{'':<{width}}   {host.status}: {_error_line(host)}", style="red"))
    console.print(f"logs: {result.run_dir}", highlight=False)


def _error_line(host: Any) -> str:
    """The host's error for the recap; a preflight failure whose reasons the FAILED lines and
    the checks table already gave is named by its checks, not printed a third time."""
    doc = host.data.get("preflight") if isinstance(host.data, dict) else None
    failed = (doc or {}).get("failed") if isinstance(doc, dict) else None
    if failed and host.error == "; ".join(failed):
        names = [line.split(": ", 1)[0] for line in failed]
        return f"preflight refused the launch: {', '.join(names)} (reasons above)"
    return str(host.error)


def facts_table(result: RunResult) -> Table:
    """One row per host: OS, CPU/RAM/disk, compilers, driver, GPUs, CUDA toolkits."""
    table = Table(title="facts", show_lines=True)
    for col in (
        "host",
        "os / kernel",
        "cpu / ram / disk",
        "glibc / gcc / python",
        "driver",
        "gpus",
        "cuda",
    ):
        table.add_column(col, overflow="fold")
    for name, host in result.hosts.items():
        facts: dict[str, Any] = host.data.get("facts") or {}
        if not facts:
            table.add_row(name, f"[red]{host.status}[/]", host.error or "", "", "", "", "")
            continue
        mem, disk = facts.get("memory", {}), facts.get("disk", {})
        notes = (facts.get("gpu") or {}).get("notes") or []
        table.add_row(
            name,
            f"{facts['os'].get('pretty')}\n{facts.get('kernel')} {facts.get('arch')}",
            f"{facts['cpu'].get('count')} cpu\n{gb(mem.get('available_bytes'))} free of "
            f"{gb(mem.get('total_bytes'))}\n{gb(disk.get('free_bytes'))} free under work_root",
            f"glibc {facts.get('glibc')}\ngcc {', '.join(g['version'] for g in facts.get('gcc', [])) or 'none'}"
            f"\npython {', '.join(sorted({p['version'] for p in facts.get('python', [])})) or 'none'}",
            driver_summary(facts),
            gpu_summary(facts).replace("; ", "\n") + "".join(f"\n[yellow]{n}[/]" for n in notes),
            cuda_summary(facts).replace(", ", "\n"),
        )
    return table


def render_recipes(console: Console, result: RunResult) -> None:
    """`invoke recipes --host`: which recipe each host gets and why."""
    table = Table(title="recipe per host", show_lines=True)
    for col in ("host", "recipe", "cuda", "torch", "why", "notes"):
        table.add_column(col, overflow="fold")
    for name, host in result.hosts.items():
        d = host.data
        notes = list(d.get("notes") or [])
        for pkg, problems in (d.get("problems") or {}).items():
            notes += [f"{pkg}: {p}" for p in problems]
        table.add_row(
            name,
            d.get("recipe") or f"[red]{host.status}[/]",
            str(d.get("cuda") or ""),
            str(d.get("torch") or ""),
            d.get("reason") or host.error or "",
            "\n".join(notes),
        )
    console.print(table)


def render_plan(console: Console, result: RunResult, verbose: bool = False) -> None:
    """`invoke plan` / `provision` / `install-cuda`: per host the recipe, values, then every
    step. Plan shows what each step would run summed up (`StepResult.summary`: a lock's
    hundreds of fetches as one line); a run that changed hosts shows what each step did, not
    its commands. `verbose` (``--verbose``) lists every command, as ``--json`` has them."""
    for name, host in result.hosts.items():
        d = host.data
        head = f"[bold]{name}[/]"
        if d.get("recipe"):
            head += f": recipe {d['recipe']} (CUDA {d.get('cuda')}) — {d.get('reason', '')}"
        console.print(head, highlight=False)
        values = d.get("values") or []
        if values and result.check_mode:
            vt = Table(show_header=True, box=None, padding=(0, 2))
            for col in ("value", "", "from"):
                vt.add_column(col, overflow="fold")
            for key, value, source in values:
                vt.add_row(key, escape(str(value)), f"[dim]{escape(source)}[/]")
            console.print(vt)
        for note in d.get("notes") or []:
            console.print(f"  [yellow]note:[/] {escape(note)}", highlight=False)
        if d.get("stack"):
            stack_table(console, d["stack"])
        steps = Table(show_header=False, box=None, padding=(0, 2))
        steps.add_column("state")
        steps.add_column("step")
        steps.add_column("detail", overflow="fold")
        for step in host.steps:
            state = step.status
            if result.check_mode and state == "changed":
                state = "would change"
            style = STATUS_STYLE.get(step.status, "white")
            detail = escape(step.message)
            lines = _command_lines(step, result.check_mode, verbose)
            detail += "".join(f"\n  $ {escape(cmd)}" for cmd in lines)
            steps.add_row(f"[{style}]{state}[/]", step.name, detail)
        console.print(steps)
        if host.error:
            console.print(f"  [red]{host.status}:[/] {escape(host.error)}", highlight=False)


def _command_lines(step: StepResult, check_mode: bool, verbose: bool) -> list[str]:
    """The command lines shown under a step: all of them with `verbose`; in check mode its
    summary (or its commands when it has none); after a real run none (the message says what
    it did; the host log and ``--json`` have every command)."""
    if verbose:
        return step.commands
    if not check_mode:
        return []
    return step.summary or step.commands


def inventory_table(path: Any, doc: dict[str, Any]) -> Table:
    """`invoke inventory`: one row per host: its groups and vars, each with where it came from."""
    table = Table(title=f"inventory {path or '(none)'}", show_lines=True)
    for col in ("host", "groups", "vars (source)"):
        table.add_column(col, overflow="fold")
    for name, entry in doc["hosts"].items():
        sources = entry.get("var_sources", {})
        lines = [
            f"{escape(str(k))} = {escape(short_value(v))}  [dim]({escape(str(sources.get(k, '?')))})[/]"
            for k, v in sorted(entry["vars"].items())
        ]
        table.add_row(escape(name), escape(", ".join(entry["groups"])), "\n".join(lines))
    return table


#: Longest var value `invoke inventory` shows whole to people (--json always has it whole).
SHORT_VALUE_CHARS = 200


def short_value(value: Any, limit: int = SHORT_VALUE_CHARS) -> str:
    """A var's value as people read it (repr), cut to `limit` characters with its full length
    said: a 10 MB value would take a minute to lay out and flood the terminal."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}... ({len(text)} characters; --json shows it whole)"


def print_explain(result: RunResult) -> None:
    """``--explain``: per host and package, the build settings with the reason for each, on
    stderr once the run is over (the library records the rows in each host's result)."""
    console = Console(file=redacting(True), width=160)
    for host, res in result.hosts.items():
        rows: list[dict[str, str]] = res.data.get("explain") or []
        for package in dict.fromkeys(str(r.get("package", "")) for r in rows):
            table = Table(title=f"{host}: {package} build settings", show_lines=False)
            for col in ("setting", "value", "why"):
                table.add_column(col, overflow="fold")
            for row in rows:
                if str(row.get("package", "")) == package:
                    table.add_row(escape(row["name"]), escape(row["value"]), escape(row["reason"]))
            console.print(table)


def render_build(console: Console, result: RunResult) -> None:
    """Per host and package: version, where the wheel came from, key, build time, log."""
    table = Table(title=result.task, show_lines=False)
    for col in ("host", "package", "version", "wheel from", "key", "seconds", "log"):
        table.add_column(col, overflow="fold")
    for host, res in result.hosts.items():
        packages: dict[str, Any] = res.data.get("packages") or {}
        if not packages:
            table.add_row(host, "", "", f"[red]{res.status}[/]", "", "", escape(res.error or ""))
        for name, rec in packages.items():
            table.add_row(
                host,
                name,
                str(rec.get("version") or ""),
                escape(
                    str(rec.get("wheel_from") or res.status)
                    + (
                        f" ({compile_cache.summary(rec['compile_cache'])})"
                        if rec.get("wheel_from") == "build" and rec.get("compile_cache")
                        else ""
                    )
                    + "".join(f"; OOM, retried: {c}" for c in rec.get("oom_retries") or ())
                ),
                str(rec.get("key") or "")[:12],
                f"{rec.get('seconds') or 0:.0f}",
                escape(str(rec.get("log") or "")),
            )
    console.print(table)


def render_key(console: Console, result: RunResult) -> None:
    """`cache.key`: each input and the key, per host."""
    for host, res in result.hosts.items():
        if not res.data.get("inputs"):
            console.print(f"[bold]{host}[/]: [red]{res.status}[/] {escape(res.error or '')}")
            continue
        title = f"{host}: {res.data.get('package')}"
        if res.data.get("predicted"):
            title += " (predicted: toolkit/env not installed yet)"
        table = Table(title=title, show_header=False, box=None, padding=(0, 2))
        table.add_column("input")
        table.add_column("value", overflow="fold")
        for label, value in res.data["inputs"]:
            style = "bold" if label == "key" else ""
            table.add_row(label, f"[{style}]{escape(value)}[/]" if style else escape(value))
        console.print(table)
