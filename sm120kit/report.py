"""People-facing output: the Ansible-like recap and per-task tables (rich, to a console)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .facts import cuda_summary, driver_summary, gb, gpu_summary
from .progress import STATUS_STYLE
from .results import RunResult


def recap(console: Console, result: RunResult) -> None:
    """PLAY RECAP-style lines: per host ok/changed/failed/unreachable/skipped, then the run dir."""
    console.print()
    console.print(f"[bold]RECAP[/] {result.task}" + (" (check mode)" if result.check_mode else ""))
    width = max((len(n) for n in result.hosts), default=4)
    for name, host in result.hosts.items():
        c = host.counts()
        line = Text(f"{name:<{width}} : ", style=STATUS_STYLE.get(host.status, ""))
        for key in ("ok", "changed", "unreachable", "failed", "skipped"):
            style = STATUS_STYLE[key] if c[key] else "dim"
            line.append(f"{key}={c[key]}  ", style=style)
        console.print(line)
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
