"""Live per-host progress: a rich table on a terminal, plain timestamped lines elsewhere."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

if TYPE_CHECKING:
    from ..runner.results import HostResult

STATUS_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "failed": "red",
    "unreachable": "red",
    "skipped": "cyan",
}


class Progress:
    """Progress events from the runner; the base class ignores them."""

    def start(self, task: str, hosts: list[str], run_dir: str) -> None: ...

    def host_started(self, host: str) -> None: ...

    def step(self, host: str, name: str, detail: str = "") -> None: ...

    def host_done(self, host: str, result: HostResult) -> None: ...

    def stop(self) -> None: ...


class NullProgress(Progress):
    """No progress output (library use, tests)."""


class PlainProgress(Progress):
    """One line per event, for logs and CI (output that is not a terminal)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._start: dict[str, float] = {}
        self._lock = threading.Lock()

    def _line(self, text: str) -> None:
        with self._lock:
            self.console.print(f"{time.strftime('%H:%M:%S')} {text}", highlight=False, markup=False)

    def start(self, task: str, hosts: list[str], run_dir: str) -> None:
        self._line(f"{task}: {len(hosts)} host(s), logs in {run_dir}")

    def host_started(self, host: str) -> None:
        self._start[host] = time.monotonic()

    def step(self, host: str, name: str, detail: str = "") -> None:
        elapsed = time.monotonic() - self._start.get(host, time.monotonic())
        self._line(f"[{host}] {name}{' ' + detail if detail else ''} ({elapsed:.1f}s)")

    def host_done(self, host: str, result: HostResult) -> None:
        suffix = f": {result.error}" if result.error else ""
        self._line(f"[{host}] {result.status} ({result.seconds:.1f}s){suffix}")


class LiveProgress(Progress):
    """A live rich table: host, state, current step, elapsed."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._rows: dict[str, dict[str, Any]] = {}
        self._task = ""
        self._live: Live | None = None
        self._lock = threading.Lock()

    def _render(self) -> Table:
        table = Table(title=self._task, expand=False, show_edge=False)
        for col in ("host", "state", "step", "elapsed"):
            table.add_column(col)
        now = time.monotonic()
        with self._lock:
            for host, row in self._rows.items():
                end = row.get("end") or now
                elapsed = f"{end - row['start']:.1f}s" if row.get("start") else ""
                state = row["state"]
                table.add_row(
                    host,
                    f"[{STATUS_STYLE.get(state, 'white')}]{state}[/]",
                    row.get("step", ""),
                    elapsed,
                )
        return table

    def start(self, task: str, hosts: list[str], run_dir: str) -> None:
        self._task = f"{task} — logs: {run_dir}"
        self._rows = {h: {"state": "queued", "step": ""} for h in hosts}
        self._live = Live(
            get_renderable=self._render, console=self.console, refresh_per_second=4, transient=False
        )
        self._live.start()

    def host_started(self, host: str) -> None:
        with self._lock:
            self._rows[host].update(state="running", start=time.monotonic())

    def step(self, host: str, name: str, detail: str = "") -> None:
        with self._lock:
            self._rows[host]["step"] = name + (f" {detail}" if detail else "")

    def host_done(self, host: str, result: HostResult) -> None:
        with self._lock:
            row = self._rows[host]
            row.update(state=result.status, end=time.monotonic())
            if result.error:
                row["step"] = result.error[:80]

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def progress_for(console: Console, enabled: bool = True) -> Progress:
    """Live table on a terminal, plain lines otherwise, nothing when disabled."""
    if not enabled:
        return NullProgress()
    return LiveProgress(console) if console.is_terminal else PlainProgress(console)
