"""How commands reach a host: over SSH with fabric, or on this machine for `local`.

Both connections count the commands they run (the fan-out benchmark and a test check that
facts costs one command per host) and never log what they send on stdin, which may carry
scripts with secrets rendered in.

Every command runs in its own process group (a new session: `setsid` on the host, a new
session for `local`), so a run that is cancelled (SIGINT/SIGTERM/SIGHUP, see `cancel_all`)
or a command that outlives its timeout is killed whole, children included, instead of
living on as an orphan. The password variables are removed from every command's
environment.

An SSH connection keeps under the server's limit on sessions per connection (OpenSSH's
MaxSessions, 10 by default): commands, processes and SFTP sessions each take one from the
host's session pool (`runner.sessions`), which opens more connections to the host when a run
needs more sessions than one allows and never lets a thread wait on a session it holds. SFTP sessions are lent to one thread at a
time: paramiko's SFTPClient reads its replies from whichever thread asks, so two threads on
one client take each other's replies (seen as "Server connection dropped").
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fabric
import paramiko
from fabric.config import Config
from paramiko import SFTPClient
from paramiko.sftp import SFTPError
from paramiko.ssh_exception import SSHException
from tenacity import (
    RetryError,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from ..errors import ConnectionLost, HostUnreachable, Interrupted, one_line
from ..inventory.host import Host
from . import known_hosts as known_hosts_file
from .channels import (
    SECRET_ENV,
    kill_remote_group,
    killed_by,
    rekey_like_openssh,
)
from .exec_channel import Lost, exec_on
from .sessions import DEFAULT_SILENCE, Lease, Sessions

# paramiko logs a traceback for every failed handshake (e.g. a port that does not speak
# SSH); our one-line error says it, so its records go nowhere instead of to stderr.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
logging.getLogger("paramiko").propagate = False

#: Set when the run is cancelled: commands in flight are killed and new ones refused.
_CANCEL = threading.Event()
_STATE = threading.local()

_REASON = ["cancelled"]


def cancel_all(reason: str = "cancelled") -> None:
    """Cancel the run: every command in flight is killed (its process group), new ones refused
    (they raise Interrupted(reason), e.g. "SIGTERM").

    Commands run inside `uncancelled()` (cleanup: releasing locks) still run.
    """
    _REASON[0] = reason
    _CANCEL.set()


def reset_cancel() -> None:
    """Clear a previous cancellation (a new run in the same process)."""
    _CANCEL.clear()


def cancelled() -> bool:
    """True when the run was cancelled and this thread is not doing cleanup."""
    return _CANCEL.is_set() and not getattr(_STATE, "cleanup", False)


def cancel_reason() -> str:
    """Why the run was cancelled ("SIGINT"): what Interrupted carries."""
    return _REASON[0]


class uncancelled:  # noqa: N801 - used like a function: `with uncancelled():`
    """Context manager: commands in this thread run even after `cancel_all` (cleanup)."""

    def __enter__(self) -> None:
        self._old = getattr(_STATE, "cleanup", False)
        _STATE.cleanup = True

    def __exit__(self, *exc: object) -> None:
        _STATE.cleanup = self._old


class uncounted:  # noqa: N801 - used like a function: `with uncounted():`
    """Context manager: commands in this thread are not counted in `commands_run` (the lock
    heartbeat, whose number depends on how long the run takes)."""

    def __enter__(self) -> None:
        self._old = getattr(_STATE, "uncounted", False)
        _STATE.uncounted = True

    def __exit__(self, *exc: object) -> None:
        _STATE.uncounted = self._old


def _count(conn: Connection) -> None:
    if not getattr(_STATE, "uncounted", False):
        conn.commands_run += 1


def scrubbed_env() -> dict[str, str]:
    """This process's environment without the password variables."""
    return {k: v for k, v in os.environ.items() if k not in SECRET_ENV}


@dataclass
class CommandResult:
    """What one remote (or local) command did."""

    command: str
    stdout: str
    stderr: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass
class ConnectOptions:
    """Controller-side SSH settings shared by every connection of a run."""

    known_hosts: str | None = None
    accept_new_host_keys: bool = False
    connect_timeout: float = 10.0
    connect_retries: int = 3
    retry_backoff: float = 0.5
    ssh_password: str | None = None
    sudo_password: str | None = None
    load_ssh_config: bool = True
    #: The most sessions (commands, SFTP) one connection opens at once: sshd's MaxSessions.
    max_sessions: int = 10
    #: Seconds a keepalive may go unanswered before the connection is closed as silent.
    silence_timeout: float = DEFAULT_SILENCE

    def known_hosts_path(self) -> Path:
        return Path(os.path.expanduser(self.known_hosts or "~/.ssh/known_hosts"))


class Connection:
    """A way to run commands on one host. Subclasses: `LocalConnection`, `SSHConnection`."""

    host: Host

    def __init__(self, host: Host) -> None:
        self.host = host
        self.commands_run = 0
        #: While a run holds the host lock: its directory, where each command leaves its
        #: process group id (see `remote_wrapper`).
        self.pgid_dir: str | None = None

    def open(self) -> None:
        """Establish the connection (no-op for local). Raises HostUnreachable."""

    def run(
        self, command: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> CommandResult:
        """Run a shell command; never raises on a non-zero exit (callers decide)."""
        raise NotImplementedError

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        """Copy a controller file to an absolute path on the host."""
        raise NotImplementedError

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        """Copy an absolute path on the host to a controller file."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection."""


class LocalConnection(Connection):
    """Runs commands on this machine with bash, for the `local` host."""

    def run(
        self, command: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> CommandResult:
        if cancelled():
            raise Interrupted(_REASON[0])
        _count(self)
        proc = subprocess.Popen(
            ["bash", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=scrubbed_env(),
            start_new_session=True,  # its own process group: killed whole on cancel/timeout
        )
        if self.pgid_dir:
            marks = Path(os.path.expanduser(self.pgid_dir))
            if marks.is_dir():
                (marks / f"pg.{proc.pid}").touch()
        deadline = None if timeout is None else time.monotonic() + timeout
        _feed(proc, stdin or "")
        while True:
            try:
                out, err = proc.communicate(timeout=0.2)
                return CommandResult(command, out, err, proc.returncode)
            except subprocess.TimeoutExpired:
                pass  # communicate() keeps what it read so far
            if cancelled() or (deadline is not None and time.monotonic() > deadline):
                _killpg(proc.pid)
                out, err = proc.communicate()
                if cancelled():
                    raise Interrupted(_REASON[0])
                return CommandResult(command, _text(out), _text(err), 124)

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        dest = Path(os.path.expanduser(remote))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, dest)

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        shutil.copyfile(os.path.expanduser(remote), local)


def _feed(proc: subprocess.Popen[str], data: str) -> None:
    """Write `data` to the child's stdin from a thread, then close it, and detach stdin from
    `proc` so communicate() only reads. Why not communicate(input=..., timeout=...) in a loop:
    a retry must pass input=None (CPython refuses input once communication started), and then
    it no longer writes what the first call left unsent, so a child still reading a script
    longer than the pipe buffer (64 KiB) when the first call timed out waits forever."""
    pipe = proc.stdin
    proc.stdin = None
    if pipe is None:
        return

    def write() -> None:
        try:
            if data:
                pipe.write(data)
        except (BrokenPipeError, OSError, ValueError):
            pass  # the child exited or was killed before reading it all
        finally:
            try:
                pipe.close()
            except (BrokenPipeError, OSError):
                pass

    if len(data) < 4096:
        write()  # fits the pipe buffer: no thread needed
    else:
        threading.Thread(target=write, name="stdin-feed", daemon=True).start()


def _killpg(pgid: int) -> None:
    """SIGTERM a local process group, then SIGKILL what is left of it after a moment."""

    for sig, wait in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _text(data: Any) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


# Appends to known_hosts from many threads must not interleave.
_KNOWN_HOSTS_LOCK = threading.Lock()


class SSHConnection(Connection):
    """An SSH connection through fabric, with host keys verified against known_hosts."""

    def __init__(self, host: Host, options: ConnectOptions) -> None:
        super().__init__(host)
        self.options = options
        self._conn: Any = None
        #: Every session (command, process, SFTP) of this host comes from here.
        self.sessions = Sessions(
            self._dial,
            options.max_sessions,
            self._where(),
            silence=options.silence_timeout,
            cancelled=cancelled,
        )
        self.sessions.reclaim = self._reclaim_sftp
        #: SFTP sessions kept open and lent out (`sftp_session`), at most this many.
        self._sftp_max = SFTP_SESSIONS
        self._sftp_idle: list[Any] = []
        self._sftp_open = 0
        self._sftp_leases: dict[int, Lease] = {}
        self._sftp_free = threading.Condition()
        self._held = threading.local()

    def _fabric(self) -> Any:

        config = Config(
            overrides={"load_ssh_configs": self.options.load_ssh_config, "run": {"pty": False}}
        )
        if self.options.sudo_password:
            config.sudo.password = self.options.sudo_password
        connect_kwargs: dict[str, Any] = {}
        if self.host.key_file:
            connect_kwargs["key_filename"] = [self.host.key_file]
        if self.options.ssh_password:
            connect_kwargs["password"] = self.options.ssh_password
        conn = fabric.Connection(
            host=self.host.address,
            user=self.host.user,
            port=self.host.port,
            config=config,
            connect_timeout=self.options.connect_timeout,
            connect_kwargs=connect_kwargs,
        )
        known = self._known_hosts_file(conn)
        if known.exists() and not known.is_file():
            # Not a connect error worth retrying: the same file is read on every attempt.
            raise HostKeyError(
                f"known_hosts {known} is not a file (a directory?); point setting known_hosts "
                "(or ssh_config's UserKnownHostsFile) at a known_hosts file"
            )
        # paramiko's own store stays empty so every presented key reaches the policy, which
        # reads known_hosts as OpenSSH does (known_hosts.py: markers, several keys per host).
        conn.client.set_missing_host_key_policy(
            (_AcceptNewPolicy if self.options.accept_new_host_keys else _RejectPolicy)(
                known, self.host
            )
        )
        return conn

    def _known_hosts_file(self, conn: Any) -> Path:
        if self.options.known_hosts:
            return self.options.known_hosts_path()
        configured = conn.ssh_config.get("userknownhostsfile")
        if configured:
            return Path(os.path.expanduser(str(configured).split()[0]))
        return self.options.known_hosts_path()

    def open(self) -> None:
        if self._conn is not None and self._conn.is_connected:
            return
        self._conn = self._dial()
        self.sessions.adopt(self._conn)

    def _dial(self) -> Any:
        """A new open fabric connection to the host (bounded retries), or HostUnreachable."""

        def transient(exc: BaseException) -> bool:
            if isinstance(
                exc, (paramiko.BadHostKeyException, paramiko.AuthenticationException, HostKeyError)
            ):
                return False
            return isinstance(
                exc,
                (
                    paramiko.ssh_exception.NoValidConnectionsError,
                    socket.timeout,
                    TimeoutError,
                    ConnectionError,
                    EOFError,
                    OSError,
                    paramiko.SSHException,
                ),
            )

        @retry(
            retry=retry_if_exception(transient),
            stop=stop_after_attempt(max(1, self.options.connect_retries)),
            wait=wait_exponential(multiplier=self.options.retry_backoff, max=8),
            reraise=True,
        )
        def connect() -> Any:
            conn = self._fabric()
            try:
                conn.open()
            except BaseException:
                conn.close()
                raise
            rekey_like_openssh(conn.client.get_transport())
            return conn

        try:
            return connect()
        except HostKeyError as exc:
            raise HostUnreachable(str(exc)) from None
        except paramiko.BadHostKeyException as exc:
            raise HostUnreachable(
                f"host key for {self._where()} CHANGED: known_hosts has "
                f"{_fingerprint(exc.expected_key)}, the host presented {_fingerprint(exc.key)}; "
                "refusing to connect (if the change is expected, remove the old entry with "
                f"ssh-keygen -R '{_known_hosts_name(self.host)}')"
            ) from None
        except paramiko.AuthenticationException as exc:
            raise HostUnreachable(f"authentication failed for {self._where()}: {exc}") from None
        except RetryError as exc:  # pragma: no cover - reraise=True makes this rare
            raise HostUnreachable(f"cannot connect to {self._where()}: {exc}") from None
        except Exception as exc:
            reason = one_line(str(exc) or type(exc).__name__)
            if _not_ssh(exc):
                raise HostUnreachable(
                    f"{self._where()} does not speak SSH (no SSH banner: {reason}); "
                    "check ansible_port"
                ) from None
            raise HostUnreachable(
                f"cannot connect to {self._where()} after "
                f"{self.options.connect_retries} attempt(s): {reason}"
            ) from None

    def _where(self) -> str:
        user = f"{self.host.user}@" if self.host.user else ""
        port = f":{self.host.port}" if self.host.port else ""
        return f"{user}{self.host.address}{port}"

    def session(self, doing: str, *, urgent: bool = False) -> tuple[Lease, Any]:
        """A session of the pool and a new channel on it, for `doing` (`urgent`: never waits;
        a process that holds it for its life). The caller releases the lease once the channel
        closed."""
        self.open()
        lease = self.sessions.lease(urgent=urgent)
        try:
            return lease, self.sessions.channel(lease)
        except (OSError, EOFError, _ssh_exception()) as exc:
            lease.release()
            if lease.link.silent:
                raise ConnectionLost(self.lost_why(lease, doing)) from None
            raise HostUnreachable(f"connection to {self._where()} lost: {exc}") from None
        except BaseException:
            lease.release()
            raise

    def kill_group(self, pgid: int) -> None:
        """End a process group on the host over a session of its own (never waits)."""
        try:
            lease = self.sessions.lease(urgent=True)
        except Exception:  # noqa: BLE001 - no connection at all: nothing to kill over
            return
        try:
            kill_remote_group(lease.transport, pgid)
        finally:
            lease.release()

    def lost_why(self, lease: Lease, doing: str) -> str:
        """What to say when `lease`'s connection went away while `doing`."""
        if lease.link.silent:
            return f"host {self._where()}: {lease.link.silent} while {doing}"
        return f"connection to {self._where()} lost while {doing}"

    def transport(self) -> Any:
        """The open connection's paramiko transport (connecting first)."""
        self.open()
        return self._conn.client.get_transport()

    def run(
        self, command: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> CommandResult:
        # A raw paramiko channel, not fabric's run(): invoke feeds in_stream one byte per
        # 10 ms, which makes shipping a 10 kB script take minutes.
        if cancelled():
            raise Interrupted(_REASON[0])
        _count(self)
        lease, chan = self.session(f"running {one_line(command)[:80]!r}")
        try:
            out, err, code = exec_on(
                lease.transport,
                chan,
                command,
                stdin,
                timeout,
                self.pgid_dir,
                self.kill_group,
                cancelled,
            )
        except Lost as lost:
            ended = self._end_group(lost.pgid)
            doing = f"running {one_line(command)[:80]!r}" if lease.link.silent else "a command ran"
            raise ConnectionLost(f"{self.lost_why(lease, doing)} ({ended})") from None
        except (OSError, EOFError, _ssh_exception()) as exc:
            raise HostUnreachable(f"connection to {self._where()} lost: {exc}") from None
        finally:
            lease.release()
        if code is None:
            raise Interrupted(_REASON[0])
        return CommandResult(command, out, killed_by(err, code)[0], code)

    def _end_group(self, pgid: int | None) -> str:
        """End a command's process group on the host over a new connection, after the one it
        ran on was lost: left running, it would work on beside the next run (a stack install
        still writing into the env the next run makes again). Says what was done."""
        if pgid is None:
            return "its process group was not known yet"
        conn = None
        try:
            conn = self._fabric()  # a connection of its own: other threads may hold the old one
            conn.open()
            kill_remote_group(conn.client.get_transport(), pgid)
        except Exception as exc:  # noqa: BLE001 - reported; the host lock's takeover is the net
            return f"its process group {pgid} may still run on the host: {one_line(str(exc))}"
        finally:
            if conn is not None:
                conn.close()
        return f"its process group {pgid} on the host was ended"

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        mode = os.stat(local).st_mode & 0o7777

        def copy(sftp: Any) -> None:
            sftp.put(str(local), remote)
            sftp.chmod(remote, mode)

        self._transfer(copy, f"copying {local} to {self._where()}:{remote}")

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        self._transfer(
            lambda sftp: sftp.get(remote, str(local)),
            f"copying {self._where()}:{remote} to {local}",
        )

    def _transfer(self, copy: Callable[[Any], None], what: str) -> None:
        """`copy` with a lent SFTP session, again on a fresh one when the session broke
        (a dropped channel or connection); a missing file or a refused write is not retried."""

        @retry(
            retry=retry_if_exception(_sftp_broken),
            stop=stop_after_attempt(max(1, self.options.connect_retries)),
            wait=wait_exponential(multiplier=self.options.retry_backoff, max=8),
            reraise=True,
        )
        def once() -> None:
            with self.sftp_session() as sftp:
                copy(sftp)

        try:
            once()
        except Exception as exc:
            if _sftp_broken(exc):
                raise HostUnreachable(f"{what}: connection lost: {one_line(str(exc))}") from None
            raise

    @contextmanager
    def sftp_session(self) -> Iterator[Any]:
        """An SFTP client of this connection, this thread's alone for the block (a nested
        block in the same thread gets the same one). One that broke in the block is closed,
        the others are kept for the next block."""
        held = getattr(self._held, "sftp", None)
        if held is not None:
            yield held
            return
        client = self._sftp_checkout()
        self._held.sftp = client
        broken = False
        try:
            with self.sessions.holding():
                yield client
        except BaseException as exc:
            broken = _sftp_broken(exc) or _gone(client)
            if broken and isinstance(exc, OSError) and not _sftp_broken(exc):
                # paramiko's "Socket is closed" reads like a file's error (an OSError
                # without errno); the session, not the file, failed.
                raise SessionLost(f"SFTP session lost: {one_line(str(exc))}") from exc
            raise
        finally:
            self._held.sftp = None
            with self._sftp_free:
                if broken or _gone(client):
                    self._close_sftp(client)
                    self._sftp_open -= 1
                else:
                    self._sftp_idle.append(client)
                self._sftp_free.notify()

    def _sftp_checkout(self) -> Any:
        with self._sftp_free:
            while True:
                while self._sftp_idle:
                    client = self._sftp_idle.pop()
                    if not _gone(client):
                        return client
                    self._close_sftp(client)
                    self._sftp_open -= 1
                if self._sftp_open < self._sftp_max:
                    self._sftp_open += 1
                    break
                self._sftp_free.wait()
        try:
            client = self._new_sftp()
        except BaseException:
            with self._sftp_free:
                self._sftp_open -= 1
                self._sftp_free.notify()
            raise
        return client

    def _new_sftp(self, *, urgent: bool = False) -> Any:

        lease, chan = self.session("opening an SFTP session", urgent=urgent)
        try:
            chan.invoke_subsystem("sftp")
            client = SFTPClient(chan)
        except BaseException:
            chan.close()
            lease.release()
            raise
        self._sftp_leases[id(client)] = lease
        return client

    def _close_sftp(self, client: Any) -> None:
        _close_quietly(client)
        lease = self._sftp_leases.pop(id(client), None)
        if lease is not None:
            lease.release()

    def _reclaim_sftp(self) -> bool:
        """Close one idle kept SFTP session for a thread waiting for a session."""
        with self._sftp_free:
            if not self._sftp_idle:
                return False
            client = self._sftp_idle.pop()
            self._sftp_open -= 1
            self._sftp_free.notify()
        self._close_sftp(client)
        return True

    def sftp(self) -> Any:
        """A new SFTP client of this connection, the caller's to own (an SFTP cache store of
        its own: one per thread); its session is given back when it is closed."""
        client = self._new_sftp(urgent=True)
        close, lease = client.close, self._sftp_leases.pop(id(client))

        def closing() -> None:
            close()
            lease.release()

        client.close = closing
        return client

    def close(self) -> None:
        with self._sftp_free:
            idle, self._sftp_idle = self._sftp_idle, []
            self._sftp_open = 0
        for client in idle:
            self._close_sftp(client)
        self.sessions.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None


#: SFTP sessions an SSH connection keeps for its host's file copies and host store.
SFTP_SESSIONS = 2


def _sftp_broken(exc: BaseException) -> bool:
    """The SFTP session (or the connection under it) is gone or garbled, as opposed to the
    server's answer about a file (missing, refused, failed), which paramiko raises as an
    OSError."""

    return isinstance(exc, (EOFError, socket.timeout, ConnectionError, SFTPError)) or isinstance(
        exc, _ssh_exception()
    )


class SessionLost(ConnectionError):
    """An SFTP session (or the connection under it) went away during an operation."""


def _gone(client: Any) -> bool:
    """The SFTP client's channel is closed, or its connection is."""
    channel = client.get_channel()
    transport = channel.get_transport() if channel is not None else None
    return channel is None or channel.closed or transport is None or not transport.is_active()


def _close_quietly(client: Any) -> None:
    try:
        client.close()
    except Exception:  # noqa: BLE001 - closing a session that already broke
        pass


def _not_ssh(exc: BaseException) -> bool:
    """True when the peer answered but not with SSH (no or a garbled protocol banner)."""
    text = str(exc)
    return "protocol banner" in text or "No existing session" in text or "Bad protocol" in text


def _ssh_exception() -> type[Exception]:

    return SSHException


def connect(host: Host, options: ConnectOptions) -> Connection:
    """The connection a host needs: local for `ansible_connection: local`, else SSH."""
    return LocalConnection(host) if host.is_local else SSHConnection(host, options)


class HostKeyError(Exception):
    """Raised by our missing-host-key policies; turned into HostUnreachable."""


def _fingerprint(key: Any) -> str:

    digest = hashlib.sha256(key.asbytes()).digest()
    return f"{key.get_name()} SHA256:{base64.b64encode(digest).decode().rstrip('=')}"


def _known_hosts_name(host: Host) -> str:
    return f"[{host.address}]:{host.port}" if host.port and host.port != 22 else host.address


def _policy_base() -> type:

    return paramiko.MissingHostKeyPolicy


class _RejectPolicy(_policy_base()):  # type: ignore[misc]
    """Every presented key is judged against known_hosts; unknown keys are refused."""

    def __init__(self, known_hosts: Path, host: Host) -> None:
        self.known_hosts = known_hosts
        self.host = host

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        if self._judge(hostname, key) is not known_hosts_file.Verdict.UNKNOWN:
            return
        raise HostKeyError(
            f"host key of {hostname} ({_fingerprint(key)}) is not in {self.known_hosts}; "
            "verify it and add it (ssh-keyscan), or pass --accept-new-host-keys to trust it "
            "on first use"
        )

    def _judge(self, hostname: str, key: Any) -> known_hosts_file.Verdict:
        """ACCEPT or UNKNOWN; a revoked or changed key raises HostKeyError."""
        result = known_hosts_file.check_host(
            self.known_hosts, self.host.address, self.host.port, key.asbytes()
        )
        refusal = known_hosts_file.refusal(result, hostname, _fingerprint(key), self.known_hosts)
        if refusal:
            raise HostKeyError(refusal)
        return result.verdict


class _AcceptNewPolicy(_RejectPolicy):
    """Trust on first use: record a new key in known_hosts; changed or revoked keys are still
    refused."""

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:

        if self._judge(hostname, key) is not known_hosts_file.Verdict.UNKNOWN:
            return
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _KNOWN_HOSTS_LOCK:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.known_hosts, "a", encoding="ascii") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fh.write(line)
