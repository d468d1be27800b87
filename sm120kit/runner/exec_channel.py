"""One command on an SSH channel: stdin sent whole, stdout and stderr read as they come, and
its process group killed on a timeout or a cancel (`SSHConnection.run` builds on it)."""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable
from typing import Any

from .channels import PGID_MARK, remote_wrapper, send_eof

#: Seconds to wait for the channel's EOF after the exit status arrived with no output since
#: (see _exec). On two cores at a load of 20, sshd itself can be off the CPU for seconds
#: between reaping a command and forwarding its last output.
_EOF_GRACE = 15.0
#: The longest one wait for the channel sleeps: how soon a cancel, a timeout or the end of
#: the EOF grace is seen while the command is silent.
_IDLE_WAIT = 0.2


def exec_on(
    transport: Any,
    chan: Any,
    command: str,
    stdin: str | None,
    timeout: float | None,
    pgid_dir: str | None,
    kill: Callable[[int], None],
    cancelled: Callable[[], bool],
) -> tuple[str, str, int | None]:
    """Run one command on an SSH transport: stdin sent whole, stdout/stderr read as they come.

    The command runs in its own process group on the host (`remote_wrapper`); on a timeout or
    a cancel that group is killed over a session of its own before the result returns.
    """
    chan.exec_command(remote_wrapper(command, pgid_dir))
    sender: threading.Thread | None = None
    if stdin:
        data = stdin.encode()

        def send() -> None:
            try:
                chan.sendall(data)
                send_eof(chan)
            except OSError:
                pass  # the command exited without reading all of its stdin

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
    else:
        send_eof(chan)
    out, err = bytearray(), bytearray()
    pgid: int | None = None
    deadline = None if timeout is None else time.monotonic() + timeout
    drain_until: float | None = None
    while True:
        busy = False
        if chan.recv_ready():
            out += chan.recv(65536)
            busy = True
        if chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
            busy = True
        if pgid is None and b"\n" in err and err.startswith(PGID_MARK):
            line, _, rest = bytes(err).partition(b"\n")
            pgid = int(line[len(PGID_MARK) :] or 0) or None
            err = bytearray(rest)
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            # OpenSSH sends exit-status as soon as it reaps the command (session.c
            # session_exit_message), which can be before the command's last output has been
            # read from its pipes: stopping at exit-status then loses that output (an empty
            # stdout under load). The output is complete at the channel's EOF; a command that
            # left a background process holding its stdout never sends one, hence the bound.
            if chan.eof_received or chan.closed:
                break
            now = time.monotonic()
            drain_until = drain_until or now + _EOF_GRACE
            if now > drain_until:
                break
        elif busy and drain_until is not None:
            # Output still arriving after exit-status: sshd is behind, not a background
            # process holding the pipe; the grace counts from the last output seen.
            drain_until = time.monotonic() + _EOF_GRACE
        stop = cancelled()
        if stop or (deadline is not None and time.monotonic() > deadline):
            if pgid is not None:
                kill(pgid)
            chan.close()
            return out.decode(errors="replace"), err.decode(errors="replace"), None if stop else 124
        if not busy:
            _wait(chan)
    code = chan.recv_exit_status()
    chan.close()
    if sender is not None:
        sender.join(timeout=1)
    if err.startswith(PGID_MARK):  # a command too quick for the loop to see its first line
        err = bytearray(bytes(err).partition(b"\n")[2])
    if code == -1 and not transport.is_active():
        raise Lost(pgid)
    return out.decode(errors="replace"), err.decode(errors="replace"), code


def _wait(chan: Any) -> None:
    """Until the channel has output, EOF or its exit status (at most `_IDLE_WAIT`). The loop
    slept 5 ms between looks before: 200 wakeups a second of a host's every running command,
    the controller's CPU growing with the run's length (0.2-0.4 CPU-s a host over the real
    lock's stack step). The channel's pipe (paramiko ``Channel.fileno``) is readable once
    stdout or stderr has data or is closed; once both are closed (EOF) only the exit status
    is still to come."""
    if chan.eof_received or chan.closed:
        chan.status_event.wait(_IDLE_WAIT)
        return
    try:
        select.select([chan], [], [], _IDLE_WAIT)
    except (OSError, ValueError):
        time.sleep(0.005)  # no pipe to wait on (a closed channel's): look again shortly


class Lost(Exception):
    """The connection went away while a command ran (no exit status came); the command's
    process group on the host, if it was seen, may still run."""

    def __init__(self, pgid: int | None) -> None:
        super().__init__(pgid)
        self.pgid = pgid
