"""Facts: what a host is, gathered by one remote command (remote/facts_probe.py)."""

from __future__ import annotations

from typing import Any

from .runner.pool import HostContext


def gather(ctx: HostContext, *, refresh: bool = False) -> dict[str, Any]:
    """Gather the host's facts once per run (cached on the context) in a single remote command."""
    if ctx.facts is None or refresh:
        with ctx.step("facts"):
            ctx.facts = ctx.script("facts_probe", {"work_root": ctx.host.work_root})
        ctx.script_python = discovered_python(ctx.host.vars, ctx.facts)
        if ctx.script_python:
            ctx.log.info("scripts run by %s (what python3 is)", ctx.script_python)
    return ctx.facts


def discovered_python(host_vars: dict[str, Any], facts: dict[str, Any]) -> str | None:
    """The interpreter later scripts start: the one the default ``python3`` ran the facts probe
    with (its ``sys.executable``), as Ansible's interpreter discovery keeps what it found.
    None when the inventory names one (``ansible_python_interpreter``: used as given) or the
    probe could not tell."""
    if "ansible_python_interpreter" in host_vars:
        return None
    path = (facts.get("probe_python") or {}).get("path")
    return str(path) if isinstance(path, str) and path.startswith("/") else None


def gpu_summary(facts: dict[str, Any]) -> str:
    """One line: GPUs with compute capability, or why there are none."""
    gpu = facts.get("gpu") or {}
    if not gpu.get("present"):
        return f"no GPU ({gpu.get('error') or 'none found'})"
    parts = []
    for g in gpu.get("gpus", []):
        cap = g.get("compute_cap") or "cc unknown"
        mem = f", {g['memory_mib'] // 1024} GiB" if g.get("memory_mib") else ""
        parts.append(f"{g['index']}: {g['name']} ({cap}{mem})")
    return "; ".join(parts)


def driver_summary(facts: dict[str, Any]) -> str:
    gpu = facts.get("gpu") or {}
    version = gpu.get("driver_version")
    if not version:
        return "none"
    return f"{version} ({gpu.get('module') or 'module unknown'})"


def cuda_summary(facts: dict[str, Any]) -> str:
    toolkits = facts.get("cuda") or []
    if not toolkits:
        return "none"
    return ", ".join(f"{t.get('version') or '?'} ({t['path']})" for t in toolkits)


def gb(value: Any) -> str:
    return f"{value / 2**30:.1f}G" if isinstance(value, (int, float)) else "?"
