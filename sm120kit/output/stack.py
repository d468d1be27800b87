"""The serving stack for people: `invoke lock.draft`'s report and the stack table of
`plan` / `provision` (the same dicts --json prints)."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def progress_line(text: str) -> None:
    """One line per wheel the draft reads (stderr: stdout stays for the document)."""
    sys.stderr.write(f"reading {text}\n")
    sys.stderr.flush()


def draft_report(console: Console, doc: dict[str, Any]) -> None:
    """`invoke lock.draft`: the lock written, what to review, the [stack] table to paste."""
    target = doc.get("target") or {}
    verified = (
        f"verdicts for driver {target.get('driver')}, arch {target.get('arch')}"
        if target
        else "no verdicts (no --recipe, --driver or --arch)"
    )
    console.print(
        f"wrote [bold]{escape(doc['lock'])}[/]: {doc['packages']} distributions "
        f"({doc['compiled']} compiled, {doc['bytes'] / 1e9:.2f} GB of wheels read), torch "
        f"{doc['torch']} (CUDA {doc['torch_cuda']}), {verified}",
        highlight=False,
    )
    if doc["review"]:
        console.print("[yellow]review before use:[/]", highlight=False)
        for line in doc["review"]:
            console.print(f"  - {escape(line)}", highlight=False)
    else:
        console.print("review: nothing flagged", highlight=False)
    where = f"recipes/{doc['recipe']}.toml" if doc.get("recipe") else "the recipe"
    console.print(f"then set in {where}:", highlight=False)
    console.print(escape(doc["stack"]), highlight=False)


def stack_table(console: Console, stack: dict[str, Any]) -> None:
    """`plan` / `provision`: the stack's rows (top, torch, kernels, builds, anything
    flagged) and a count of the rest."""
    packages = stack.get("packages") or {}
    shown = stack.get("shown") or list(packages)
    env = stack.get("env") or "not requested (invoke provision --stack installs it)"
    console.print(
        f"  stack [bold]{escape(stack['top'])}[/] from {escape(stack['lock'])}: env {escape(env)}",
        highlight=False,
    )
    table = Table(show_header=True, box=None, padding=(0, 2))
    for col in ("package", "version", "from", "verdict", "checked / why"):
        table.add_column(col, overflow="fold")
    for name in shown:
        row = packages[name]
        detail = row.get("checked") or ""
        if row["from"] == "build":
            b = row.get("build") or {}
            src = b.get("source") or {}
            pins = ", ".join(f"{k}={v}" for k, v in src.items())
            detail = f"{row['why']}: {pins}; patches {b.get('patches')}; torch {b.get('torch')}"
        for note in row.get("notes") or []:
            detail += f"\nnote: {note}"
        table.add_row(name, row["version"], row["from"], row.get("verdict") or "", escape(detail))
    console.print(table)
    rest = len(packages) - len(shown)
    if rest > 0:
        compiled = sum(1 for n, r in packages.items() if n not in shown and r.get("compiled"))
        console.print(
            f"  + {rest} more from the release (sha256-pinned; {compiled} compiled, verified "
            "on the host before install)",
            highlight=False,
        )
