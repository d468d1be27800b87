"""Live per-host progress: a rich table on a terminal, plain timestamped lines elsewhere.

A step reports its start with `Progress.step` and no detail; every call with a detail is an
update of the running step (a file placed, a poll of the host's progress file, a wait). The
live table shows the latest update. Plain output (a CI log, a pipe) has no per-second lines:
one line per step start per host, a heartbeat of the latest update at most every
`HEARTBEAT_S` seconds per host, and each host's end (`PlainProgress`).

A transfer's words (`transfer_words`, kept by a `Meter`): files and bytes done of the total,
the rate and the ETA, e.g. ``57/207 files, 1.23/4.36 GB, 48.2 MB/s, ETA 1m04s``.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

if TYPE_CHECKING:
    from ..runner.results import HostResult

#: Seconds between two update lines of one host in plain output (a step's start always prints).
HEARTBEAT_S = 30.0

STATUS_STYLE = {
    "ok": "green",
    "changed": "yellow",
    "failed": "red",
    "unreachable": "red",
    "skipped": "cyan",
}


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _rate(n: float) -> str:
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B/s"


def duration(seconds: float) -> str:
    """``45s``, ``1m04s``, ``2h03m``: an ETA or an elapsed time as people read it."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def transfer_words(
    files_done: int, files_total: int, bytes_done: int, bytes_total: int, seconds: float
) -> str:
    """A transfer's progress for the live row: files and bytes done of the total, the mean rate
    since it started and the ETA at that rate. Bytes are those of files whose size is known
    (`bytes_total`; none known: files alone, and the ETA from the files' rate). Done: the
    total and the time it took."""
    if files_total and files_done >= files_total:
        size = f" ({_size(bytes_done)})" if bytes_total else ""
        return f"all {files_total} files{size} in {duration(seconds)}"
    parts = [f"{files_done}/{files_total} files"]
    if bytes_total:
        parts.append(f"{_size(bytes_done)}/{_size(bytes_total)}")
    if seconds <= 0 or (bytes_done if bytes_total else files_done) <= 0:
        return ", ".join(parts)
    if bytes_total:
        rate = bytes_done / seconds
        parts.append(_rate(rate))
        left = (bytes_total - bytes_done) / rate
    else:
        rate = files_done / seconds
        parts.append(f"{rate:.1f} files/s")
        left = (files_total - files_done) / rate
    parts.append(f"ETA {duration(left)}")
    return ", ".join(parts)


class Meter:
    """A transfer's counts as its parts arrive (from several threads), and its words."""

    def __init__(self, files: int, nbytes: int) -> None:
        self.files_total, self.bytes_total = files, nbytes
        self.files_done, self.bytes_done = 0, 0
        self.start = time.monotonic()
        self._lock = threading.Lock()

    def add(self, nbytes: int) -> None:
        """One file placed, of `nbytes` known bytes (0: its size is not known)."""
        with self._lock:
            self.files_done += 1
            self.bytes_done += nbytes

    def words(self) -> str:
        with self._lock:
            done, got = self.files_done, self.bytes_done
        return transfer_words(
            done, self.files_total, got, self.bytes_total, time.monotonic() - self.start
        )


class Progress:
    """Progress events from the runner; the base class ignores them. `step` with no detail:
    a step starts; with a detail: an update of the running step."""

    def start(self, task: str, hosts: list[str], run_dir: str) -> None: ...

    def host_started(self, host: str) -> None: ...

    def step(self, host: str, name: str, detail: str = "") -> None: ...

    def host_done(self, host: str, result: HostResult) -> None: ...

    def stop(self) -> None: ...


class NullProgress(Progress):
    """No progress output (library use, tests)."""


class PlainProgress(Progress):
    """Lines for logs and CI (output that is not a terminal): the run's start, each step's
    start per host, an update at most every `heartbeat` seconds per host (the latest one, so
    a long step says how far it got), each host's end. A lock of 207 files or an install
    polled every 2 s prints no line per file or per poll."""

    def __init__(self, console: Console, heartbeat: float = HEARTBEAT_S) -> None:
        self.console = console
        self.heartbeat = heartbeat
        self._start: dict[str, float] = {}
        self._last: dict[str, float] = {}  # per host: when its last line printed
        self._lock = threading.Lock()

    def _line(self, text: str) -> None:
        with self._lock:
            self.console.print(f"{time.strftime('%H:%M:%S')} {text}", highlight=False, markup=False)

    def start(self, task: str, hosts: list[str], run_dir: str) -> None:
        self._line(f"{task}: {len(hosts)} host(s), logs in {run_dir}")

    def host_started(self, host: str) -> None:
        self._start[host] = time.monotonic()

    def step(self, host: str, name: str, detail: str = "") -> None:
        now = time.monotonic()
        with self._lock:
            if detail and now - self._last.get(host, self._start.get(host, now)) < self.heartbeat:
                return  # an update within the heartbeat: the next line says where it got
            self._last[host] = now
        elapsed = now - self._start.get(host, now)
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
