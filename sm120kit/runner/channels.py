"""One SSH channel of a connection: opened (again when sshd refuses it for a moment), a
command on it wrapped in a session of its own whose process group can be killed, and the
transport's re-key thresholds.

Nothing here knows a `Connection`; `runner/connection.py` and `runner/process.py` build on it.
"""

from __future__ import annotations

import re
import shlex
import signal
from typing import Any

from paramiko import ChannelException, SFTPClient, SSHException
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

#: Variables that carry secrets; no command the tool runs (local or remote) inherits them.
SECRET_ENV = ("SM120KIT_SSH_PASSWORD", "SM120KIT_SUDO_PASSWORD")


#: First stderr line of a wrapped remote command: its process group id.
PGID_MARK = b"\x1esm120kit-pgid "


def remote_wrapper(command: str, pgid_dir: str | None = None) -> str:
    """The shell line that runs `command` on a host in a new session (its own process group).

    It prints the group id on stderr first (stripped again by `_exec`), so a timeout or a
    cancel can kill the whole group, and drops the password variables from the environment.
    With `pgid_dir` (the run lock's directory, `~/` allowed) it also leaves an empty file
    `pg.<pgid>` there when that directory exists: a later run that takes over the lock of a
    dead controller kills those groups (remote/host_lock.py).
    """

    inner = (
        'printf "\\036sm120kit-pgid %s\\n" "$$" >&2; d=$2; '
        'case $d in "~/"*) d=$HOME/${d#"~/"};; esac; '
        'if [ -n "$d" ] && [ -d "$d" ]; then : > "$d/pg.$$"; fi; '
        'exec "${SHELL:-/bin/sh}" -c "$1"'
    )
    unset = " ".join(SECRET_ENV)
    args = f"{shlex.quote(inner)} sm120kit {shlex.quote(command)} {shlex.quote(pgid_dir or '')}"
    # Without a setsid that can wait (-w: util-linux >= 2.26), sshd's own setsid() for the
    # session (no pty) already makes the shell a group leader, and `exec` keeps its pid. The
    # command appears once: the line's length is the command's plus a constant.
    return (
        f"unset {unset}; if setsid -w true 2>/dev/null; then set -- setsid -w; else set --; fi; "
        f'exec "$@" /bin/sh -c {args}'
    )


#: util-linux setsid -w's line for a child that a signal ended (setsid.c: err() with the raw
#: wait status as its exit code and whatever errno held, often 0: "Success").
_SETSID_KILLED = re.compile(r"^setsid: child \d+ did not exit normally(: [^\n]*)?$", re.M)


def killed_by(stderr: str, code: int | None) -> tuple[str, str | None]:
    """`stderr` of a wrapped command without setsid's "did not exit normally" line, and the
    signal that ended the command when that line was there (its exit code is setsid's copy
    of the wait status: the signal number in the low 7 bits)."""
    if code is None or not _SETSID_KILLED.search(stderr):
        return stderr, None
    number = code & 0x7F
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    text = _SETSID_KILLED.sub(f"killed by {name} on the host", stderr)
    return text, name


#: When paramiko starts a key re-exchange: the limit OpenSSH sets for the ciphers with 16-byte
#: blocks that paramiko prefers (2^32 blocks, 64 GiB; OpenSSH packet.c ssh_set_newkeys), and
#: a packet count well before the 32-bit sequence number wraps. Paramiko's own default is
#: 512 MiB, and a re-exchange it starts while sessions stream (a stack step copies 4 GB back
#: over SFTP while commands run beside it) can stall until it gives up with "Key-exchange
#: timed out waiting for key negotiation" and drops the connection (paramiko issue #822,
#: still open; reproduced here on loopback: two 600 MB gets and five commands in a loop).
REKEY_BYTES = 1 << 36
REKEY_PACKETS = 1 << 31


def rekey_like_openssh(transport: Any) -> None:
    """Set `transport`'s re-key thresholds to `REKEY_BYTES` and `REKEY_PACKETS`."""
    packetizer = getattr(transport, "packetizer", None)
    if packetizer is not None:
        packetizer.REKEY_BYTES = REKEY_BYTES
        packetizer.REKEY_PACKETS = REKEY_PACKETS


def send_eof(chan: Any) -> None:
    """Tell the command on `chan` that its stdin is over, unless the channel is closed.

    paramiko's ``shutdown_write()`` checks nothing, and sends after it let go of the channel's
    lock. A command that ends at once (the server sends EOF, exit-status and CLOSE, and
    paramiko's transport thread answers CLOSE) can then have this side's EOF arrive after its
    CLOSE, when sshd has freed the channel: OpenSSH ends the whole connection ("ieof packet
    referred to nonexistent channel 3", paramiko issues #1584 and #1705, both open). Seen
    here: a second host filled from the stores lost its connection right after its big SFTP
    copies, in 2 of 3 runs of the real lock (log/2026-12-05-stack-one-compile-pass-over-ssh.md).
    The check and the send both happen under the channel's lock, which the transport thread
    takes to answer a CLOSE, so the EOF goes out before that CLOSE or not at all. (A send
    waits while a key re-exchange runs, at most paramiko's clear-to-send timeout; re-keys
    come every 64 GiB.)"""
    with chan.lock:
        if chan.closed or chan.eof_sent:
            return
        message = chan._send_eof()
        if message is not None and chan.transport is not None:
            chan.transport._send_user_message(message)


#: Tries, and the most seconds between them, to open a channel the server refused.
OPEN_TRIES = 8
OPEN_WAIT_MAX = 2.0


def open_channel(transport: Any) -> Any:
    """A new session channel on `transport`, tried again when the server refuses it.

    sshd counts a closed session against MaxSessions until its main loop has collected the
    channel, so a session opened right after another closed can be refused ("no more
    sessions" in sshd's log, ChannelException 'Connect failed' here) although this side is
    within the limit; reproduced on loopback with five threads running short commands and two
    SFTP sessions. Nothing ran on a refused channel, so trying again is safe."""

    @retry(
        retry=retry_if_exception(lambda exc: refused(exc, transport)),
        stop=stop_after_attempt(OPEN_TRIES),
        wait=wait_exponential(multiplier=0.05, max=OPEN_WAIT_MAX),
        reraise=True,
    )
    def once() -> Any:
        return transport.open_session()

    return once()


def refused(exc: BaseException, transport: Any) -> bool:
    """`exc`, from opening a channel on `transport`, is the server refusing the channel.

    paramiko keeps the refusal in one attribute of the transport (``saved_exception``,
    transport.py _parse_channel_open_failure), which the first thread to look takes: when
    several threads are refused at once, the others see a bare SSHException "Unable to open
    channel." although the connection is still up."""

    if isinstance(exc, ChannelException):
        return True
    return (
        type(exc) is SSHException
        and str(exc) == "Unable to open channel."
        and transport is not None
        and transport.is_active()
    )


def open_sftp(transport: Any) -> Any:
    """An SFTP client on a channel of its own (`open_channel`)."""

    chan = open_channel(transport)
    chan.invoke_subsystem("sftp")
    return SFTPClient(chan)


def kill_remote_group(transport: Any, pgid: int) -> None:
    """SIGTERM a process group on the host, then SIGKILL what is left of it after 2 s."""
    script = (
        f"kill -TERM -- -{pgid} 2>/dev/null || exit 0; i=0; while [ $i -lt 20 ]; do "
        f"kill -0 -- -{pgid} 2>/dev/null || exit 0; sleep 0.1; i=$((i+1)); done; "
        f"kill -KILL -- -{pgid} 2>/dev/null; exit 0"
    )
    try:
        chan = open_channel(transport)
        chan.exec_command(script)
        chan.status_event.wait(10)
        chan.close()
    except Exception:  # noqa: BLE001 - the connection itself may be gone; nothing to kill then
        pass
