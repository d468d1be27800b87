"""People-facing output: the Ansible-like recap and per-task tables (rich, to a console)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .facts import cuda_summary, driver_summary, gb, gpu_summary
from .progress import STATUS_STYLE
from .results import RunResult


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
            console.print(Text(f"{'':<{width}}   {host.status}: {host.error}", style="red"))
    console.print(f"logs: {result.run_dir}", highlight=False)


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


def recipes_table(console: Console, doc: dict[str, Any]) -> None:
    """`invoke recipes` without --host: every recipe (and the one a --driver selects)."""
    table = Table(title="recipes", show_lines=True)
    for col in ("recipe", "drivers", "cuda (by driver)", "torch", "arch", "packages"):
        table.add_column(col, overflow="fold")
    for name, r in doc["recipes"].items():
        choices = "\n".join(
            f"{c['version']} ({c['method']}) for {c['drivers']}" for c in r["cuda_choices"]
        )
        table.add_row(
            f"{name}\n[dim]{r['file']}[/]",
            r["drivers"],
            f"{r['cuda']} ({r['cuda_method']})" + (f"\n{choices}" if choices else ""),
            f"{r['torch']}\n[dim]{r['torch_index']}[/]",
            ", ".join(r["arch"]),
            "\n".join(r["packages"]),
        )
    console.print(table)
    if "selected" in doc:
        sel = doc["selected"]
        console.print(
            f"driver {sel['driver']}: [bold]{sel['recipe']}[/], CUDA {sel['cuda']} — {sel['reason']}",
            highlight=False,
        )


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


def render_plan(console: Console, result: RunResult) -> None:
    """`invoke plan` / `provision` / `install-cuda`: per host the recipe, values, then every step."""
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
            if step.commands:
                detail += "".join(f"\n  $ {escape(cmd)}" for cmd in step.commands)
            steps.add_row(f"[{style}]{state}[/]", step.name, detail)
        console.print(steps)
        if host.error:
            console.print(f"  [red]{host.status}:[/] {escape(host.error)}", highlight=False)
