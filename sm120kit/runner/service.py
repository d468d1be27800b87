"""A remote script kept running to answer many requests: one start for a run's hundreds of
requests, where `run_script` starts a program for each.

The script (sm120kit/remote/<name>.py, stdlib only, bundled like any other by
`script_program`) reads one JSON request per line on stdin and writes one JSON reply per
line on stdout, each reply carrying its request's ``id``; it may answer out of order and
several at once. It ends when its stdin closes, after answering what it was asked.

Why: a stack step downloads 200 files, and a start of even the smallest downloader costs
about 0.15 CPU-s (the interpreter, urllib's imports, loading the CA bundle, a TLS
handshake) and, over SSH, a session, a shell and a process group: 30 CPU-s a host, more
than the hashing and writing of 4 GB (docs/benchmarks.md).

The program cannot arrive as ``python3 -`` does it (the interpreter would read stdin to its
end before running a line): a one-line loader given with ``-c`` reads the program's length
and then the program from stdin, and leaves the rest of stdin to the script.
"""

from __future__ import annotations

import json
import shlex
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConnectionLost, HostFailed, Interrupted, one_line
from ..remote import NO_SITE, SERVICES, script_program
from .channels import killed_by
from .connection import cancel_reason, cancelled

if TYPE_CHECKING:
    from .process import Process

#: Runs first: the program's length on one line, then the program, from stdin.
LOADER = (
    "import sys; b = sys.stdin.buffer; n = int(b.readline()); "
    "exec(compile(b.read(n).decode('utf-8'), '<sm120kit>', 'exec'))"
)


def service_command(python: str, name: str) -> str:
    """The shell command that starts service `name` under `python`."""
    flags = "-S " if name in NO_SITE else ""
    return f"{shlex.quote(python)} {flags}-c {shlex.quote(LOADER)}"


def service_input(name: str, args: dict[str, Any] | None = None) -> bytes:
    """What goes on the service's stdin first: the loader's length line and the program."""
    program = script_program(name, args).encode("utf-8")
    return b"%d\n" % len(program) + program


@dataclass
class _Pending:
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict[str, Any] | None = None


class Service:
    """A started remote script: `ask` it from any thread, `close` it when done."""

    def __init__(self, name: str, proc: Process, args: dict[str, Any] | None = None) -> None:
        if name not in SERVICES:
            raise ValueError(f"{name} is not a service (sm120kit.remote.SERVICES)")
        self.name = name
        self._proc = proc
        self._lock = threading.Lock()
        # One writer at a time: an SSH channel's sendall may send a line in parts.
        self._writing = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._next = 0
        self._ended: str | None = None
        self._lost = False
        try:
            proc.write(service_input(name, args))
        except OSError:
            pass  # it ended before reading its program: the reader says how, on the first ask
        self._reader = threading.Thread(target=self._read, name=f"service-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in iter(self._proc.readline, b""):
            try:
                reply = json.loads(line)
            except ValueError:
                continue  # noise a library printed; replies are whole JSON lines
            if not isinstance(reply, dict):
                continue
            with self._lock:
                pending = self._pending.pop(reply.get("id"), None)  # type: ignore[arg-type]
            if pending is not None:
                pending.reply = reply
                pending.done.set()
        code = self._proc.wait(5)
        err, signal_name = killed_by(self._proc.stderr_tail(), code)
        lines = err.strip().splitlines()
        tail = one_line(lines[-1]) if lines and not signal_name else ""
        why = f"exit {code}" if code is not None else "its output ended"
        if signal_name:
            # Killed on the host by someone else (a person, an OOM killer): the requests
            # waiting fail, the next request starts it again (HostContext.ask).
            why = f"killed by {signal_name} on the host; the next request starts it again"
        if self._proc.lost():
            why = self._proc.lost_why(f"waiting for a reply of remote service {self.name}")
        with self._lock:
            self._lost = self._proc.lost()
            self._ended = f"remote service {self.name} ended ({why}){': ' + tail if tail else ''}"
            left, self._pending = list(self._pending.values()), {}
        for pending in left:
            pending.done.set()

    @property
    def ended(self) -> bool:
        """The script has ended (it answers nothing more)."""
        return self._ended is not None

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to `request` (sent with an ``id`` of its own). Raises ConnectionLost when
        the connection under the script went away, HostFailed when the script ended without
        answering, Interrupted when the run is cancelled (the script is killed then)."""
        pending = _Pending()
        with self._lock:
            if self._ended is not None:
                raise ConnectionLost(self._ended) if self._lost else HostFailed(self._ended)
            self._next += 1
            ident = self._next
            self._pending[ident] = pending
        line = json.dumps({**request, "id": ident}, sort_keys=True).encode("utf-8") + b"\n"
        try:
            with self._writing:
                self._proc.write(line)
        except OSError:
            pass  # it ended: the reader says how, below
        while not pending.done.wait(0.2):
            if cancelled():
                self.kill()
                raise Interrupted(cancel_reason())
        if pending.reply is None:
            why = self._ended or f"remote service {self.name} ended"
            raise ConnectionLost(why) if self._lost else HostFailed(why)
        return pending.reply

    def close(self, timeout: float = 30.0) -> None:
        """No more requests: the script answers what it was asked and ends (killed after
        `timeout` seconds)."""
        self._proc.close_stdin()
        if self._proc.wait(timeout) is None:
            self._proc.kill()
        self._reader.join(timeout=5)

    def kill(self) -> None:
        """End the script now (its process group)."""
        self._proc.kill()


__all__ = ["LOADER", "Service", "service_command", "service_input"]
