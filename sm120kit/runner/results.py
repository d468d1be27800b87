"""What a run did, per host and per step, and its one JSON document.

JSON schema (every task, `--json`):

    {"task": "facts", "run_dir": "...", "check_mode": false,
     "hosts": {NAME: {"status": "ok|changed|failed|unreachable|skipped|interrupted",
                      "changed": N, "error": null | "one line",
                      "steps": [{"name": ..., "status": ..., "message": ..., "seconds": ...}],
                      ...task fields...}},
     "summary": {"ok": n, "changed": n, "failed": n, "unreachable": n, "skipped": n,
                 "interrupted": n},  # the last only in an interrupted run
     "interrupted": "SIGTERM"}   # only when a signal stopped the run

Every host is counted once in the summary and in the recap: an unreachable host is not also
a failed one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STATUSES = ("ok", "changed", "failed", "unreachable", "skipped", "interrupted")


@dataclass
class StepResult:
    """One step on one host."""

    name: str
    status: str = "ok"
    message: str = ""
    seconds: float = 0.0
    #: In check mode: the exact commands the step would run (empty when it is "ok").
    commands: list[str] = field(default_factory=list)
    #: The lines people read instead of `commands` (`steps.summary`: a long run of one op as
    #: one line); empty: `commands` as they are. Not in the JSON, which has every command.
    summary: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "seconds": round(self.seconds, 3),
        }
        if self.commands:
            out["commands"] = self.commands
        return out


@dataclass
class HostResult:
    """Everything one host reports for a run."""

    host: str
    status: str = "ok"
    changed: int = 0
    error: str | None = None
    steps: list[StepResult] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    log: str | None = None
    seconds: float = 0.0

    def finish(self) -> None:
        """Derive the host status from its steps unless an error already decided it."""
        if self.status in ("failed", "unreachable", "skipped", "interrupted"):
            return
        self.changed = sum(1 for s in self.steps if s.status == "changed")
        self.status = "changed" if self.changed else "ok"

    def counts(self) -> dict[str, int]:
        """Ansible-style per-host recap counters."""
        counts = {s: 0 for s in STATUSES}
        for step in self.steps:
            counts[step.status if step.status in counts else "ok"] += 1
        if self.status in ("unreachable", "interrupted"):
            # The step that could not connect (or was cut short) is this one outcome, not
            # also a failure.
            counts["failed"] = 0
            counts[self.status] = 1
        elif self.status == "failed" and counts["failed"] == 0:
            counts["failed"] = 1
        elif self.status == "skipped" and counts["skipped"] == 0:
            counts["skipped"] = 1
        elif self.status in ("ok", "changed") and not self.steps:
            counts["ok"] = 1
        counts["ok"] += counts["changed"]  # Ansible counts a changed task as ok too
        return counts

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status,
            "changed": self.changed,
            "error": self.error,
            "steps": [s.to_dict() for s in self.steps],
            "seconds": round(self.seconds, 3),
            "log": self.log,
        }
        for key, value in self.data.items():
            if key not in out:
                out[key] = value
        return out


@dataclass
class RunResult:
    """The results of one task over all its hosts."""

    task: str
    hosts: dict[str, HostResult]
    run_dir: str | None = None
    check_mode: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: The signal that stopped the run (e.g. "SIGTERM"), or None.
    interrupted: str | None = None

    @property
    def ok(self) -> bool:
        return not self.interrupted and not any(
            r.status in ("failed", "unreachable", "interrupted") for r in self.hosts.values()
        )

    def summary(self) -> dict[str, int]:
        """Hosts per status; "interrupted" appears only in a run a signal stopped."""
        out = {s: 0 for s in STATUSES}
        for r in self.hosts.values():
            out[r.status] = out.get(r.status, 0) + 1
        if not self.interrupted and not out["interrupted"]:
            del out["interrupted"]
        return out

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "task": self.task,
            "run_dir": self.run_dir,
            "check_mode": self.check_mode,
            "hosts": {name: r.to_dict() for name, r in self.hosts.items()},
            "summary": self.summary(),
        }
        if self.interrupted:
            doc["interrupted"] = self.interrupted
        doc.update(self.extra)
        return doc
