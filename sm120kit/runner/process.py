"""A command kept running on a host, talked to through its stdin and stdout: what a remote
script that serves many requests runs on (`remote.service`).

`Connection.run` sends all of stdin, then reads all the output: one command, one answer.
A `Process` stays open instead: lines go in while it runs and lines come back as it writes
them. Like every command it runs in its own process group (a new session), so `kill` ends it
whole, and over SSH it holds one of the host's sessions (sshd's MaxSessions) until it is
closed: taken without waiting (`runner.sessions`: a new connection when every one is full), so
a service that lives for a whole step never starves the commands the step still runs.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HostUnreachable, Interrupted, one_line
from .channels import PGID_MARK, remote_wrapper, send_eof
from .connection import (
    Connection,
    LocalConnection,
    SSHConnection,
    _count,
    _killpg,
    _ssh_exception,
    cancel_reason,
    cancelled,
    scrubbed_env,
)

if TYPE_CHECKING:
    from .sessions import Lease

#: How much of a process's stderr is kept for its error message.
STDERR_TAIL = 4000


class Process:
    """A running command: `write` to its stdin, `readline` from its stdout."""

    def write(self, data: bytes) -> None:
        """Send `data` to its stdin (OSError once it has gone)."""
        raise NotImplementedError

    def readline(self) -> bytes:
        """Its next stdout line, b"" at its end."""
        raise NotImplementedError

    def close_stdin(self) -> None:
        """No more input: a serving script ends when it has answered what it was asked."""
        raise NotImplementedError

    def wait(self, timeout: float) -> int | None:
        """Its exit status once it has ended, None if it still runs after `timeout`."""
        raise NotImplementedError

    def kill(self) -> None:
        """End its whole process group."""
        raise NotImplementedError

    def stderr_tail(self) -> str:
        """The end of what it wrote on stderr."""
        raise NotImplementedError

    def lost(self) -> bool:
        """Whether the connection under it went away (it ended with no exit status)."""
        return False

    def lost_why(self, doing: str) -> str:
        """What to say of the lost connection, `doing` what (after `lost`)."""
        return "the connection was lost"


class LocalProcess(Process):
    """A command on this machine (bash, a new session), for the `local` host."""

    def __init__(self, command: str) -> None:
        self._proc = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=scrubbed_env(),
            start_new_session=True,
        )
        self.pid = self._proc.pid
        self._err = bytearray()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            self._err += chunk
            del self._err[:-STDERR_TAIL]

    def write(self, data: bytes) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except ValueError as exc:  # closed already
            raise OSError(str(exc)) from None

    def readline(self) -> bytes:
        assert self._proc.stdout is not None
        return self._proc.stdout.readline()

    def close_stdin(self) -> None:
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except OSError:
            pass

    def wait(self, timeout: float) -> int | None:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        _killpg(self._proc.pid)
        self._proc.wait()

    def stderr_tail(self) -> str:
        self._reader.join(timeout=1)
        return self._err.decode(errors="replace")


class SSHProcess(Process):
    """A command on an SSH host, on a channel of its own (one of the connection's sessions,
    held until it ends)."""

    def __init__(
        self, command: str, conn: SSHConnection, lease: Lease, chan: Any, on_end: Callable[[], None]
    ) -> None:
        self._conn = conn
        self._lease = lease
        self._transport = lease.transport
        self._on_end: Callable[[], None] | None = on_end
        self._ended = threading.Lock()
        self._chan = chan
        pgid_dir = conn.pgid_dir
        self._chan.exec_command(remote_wrapper(command, pgid_dir))
        self._out = self._chan.makefile("rb")
        self._err = bytearray()
        self._pgid: int | None = None
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()

    def _read_stderr(self) -> None:
        head = bytearray()
        while True:
            try:
                chunk = self._chan.recv_stderr(65536)
            except OSError:
                return
            if not chunk:
                return
            if self._pgid is None and not self._err:
                head += chunk
                if b"\n" not in head:
                    continue
                line, _, rest = bytes(head).partition(b"\n")
                if line.startswith(PGID_MARK):
                    self._pgid = int(line[len(PGID_MARK) :] or 0) or None
                    chunk = rest
                else:
                    chunk = bytes(head)
            self._err += chunk
            del self._err[:-STDERR_TAIL]

    def write(self, data: bytes) -> None:
        if self._chan.closed:
            raise OSError("the channel is closed")
        self._chan.sendall(data)

    def readline(self) -> bytes:
        try:
            line: bytes = self._out.readline()
        except OSError:
            return b""
        return line

    def close_stdin(self) -> None:
        try:
            send_eof(self._chan)
        except OSError:
            pass

    def wait(self, timeout: float) -> int | None:
        if not self._chan.status_event.wait(timeout):
            return None
        code: int = self._chan.recv_exit_status()
        self._end()
        return code

    def kill(self) -> None:
        if self._pgid is not None:
            self._conn.kill_group(self._pgid)
        self._end()

    def lost(self) -> bool:
        return not self._transport.is_active()

    def lost_why(self, doing: str) -> str:
        if self._lease.link.silent:
            return self._conn.lost_why(self._lease, doing)
        return "the connection was lost"

    def _end(self) -> None:
        # The channel closed and its session given back, once.
        self._chan.close()
        with self._ended:
            on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end()

    def stderr_tail(self) -> str:
        self._reader.join(timeout=1)
        return self._err.decode(errors="replace")


def start(conn: Connection, command: str) -> Process:
    """Start `command` on `conn`'s host, kept running (counted as one command). Over SSH it
    waits for a free session and holds it until the process ends."""
    if cancelled():
        raise Interrupted(cancel_reason())
    if isinstance(conn, LocalConnection):
        _count(conn)
        proc = LocalProcess(command)
        if conn.pgid_dir:
            marks = Path(os.path.expanduser(conn.pgid_dir))
            if marks.is_dir():
                (marks / f"pg.{proc.pid}").touch()
        return proc
    if not isinstance(conn, SSHConnection):
        raise TypeError(f"no processes on a {type(conn).__name__}")
    _count(conn)
    lease, chan = conn.session(f"starting {one_line(command)[:80]!r}", urgent=True)
    try:
        return SSHProcess(command, conn, lease, chan, lease.release)
    except (OSError, EOFError, _ssh_exception()) as exc:
        lease.release()
        raise HostUnreachable(f"connection to {conn.host.address} lost: {exc}") from None
    except BaseException:
        lease.release()
        raise


__all__ = ["LocalProcess", "Process", "SSHProcess", "start"]
