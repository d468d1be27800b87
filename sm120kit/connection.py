"""How commands reach a host: over SSH with fabric, or on this machine for `local`.

Both connections count the commands they run (the fan-out benchmark and a test check that
facts costs one command per host) and never log what they send on stdin, which may carry
scripts with secrets rendered in.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import HostUnreachable
from .host import Host


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

    def known_hosts_path(self) -> Path:
        return Path(os.path.expanduser(self.known_hosts or "~/.ssh/known_hosts"))


class Connection:
    """A way to run commands on one host. Subclasses: `LocalConnection`, `SSHConnection`."""

    host: Host

    def __init__(self, host: Host) -> None:
        self.host = host
        self.commands_run = 0

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
        self.commands_run += 1
        try:
            proc = subprocess.run(
                ["bash", "-c", command],
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            return CommandResult(command, _text(exc.stdout), _text(exc.stderr), 124)
        return CommandResult(command, proc.stdout, proc.stderr, proc.returncode)

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        dest = Path(os.path.expanduser(remote))
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, dest)

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        shutil.copyfile(os.path.expanduser(remote), local)


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

    def _fabric(self) -> Any:
        import fabric
        from fabric.config import Config

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
            connect_timeout=int(self.options.connect_timeout),
            connect_kwargs=connect_kwargs,
        )
        known = self._known_hosts_file(conn)
        client = conn.client
        if known.exists():
            # Loaded as "system" keys so paramiko never rewrites the file behind our back.
            client.get_host_keys().load(str(known))
        client.set_missing_host_key_policy(
            _AcceptNewPolicy(known) if self.options.accept_new_host_keys else _RejectPolicy(known)
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
        import paramiko
        from tenacity import (
            RetryError,
            retry,
            retry_if_exception,
            stop_after_attempt,
            wait_exponential,
        )

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
            return conn

        try:
            self._conn = connect()
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
            reason = str(exc) or type(exc).__name__
            raise HostUnreachable(
                f"cannot connect to {self._where()} after "
                f"{self.options.connect_retries} attempt(s): {reason}"
            ) from None

    def _where(self) -> str:
        user = f"{self.host.user}@" if self.host.user else ""
        port = f":{self.host.port}" if self.host.port else ""
        return f"{user}{self.host.address}{port}"

    def run(
        self, command: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> CommandResult:
        # A raw paramiko channel, not fabric's run(): invoke feeds in_stream one byte per
        # 10 ms, which makes shipping a 10 kB script take minutes.
        self.open()
        self.commands_run += 1
        try:
            return _exec(self._conn.client.get_transport(), command, stdin, timeout)
        except (OSError, EOFError, _ssh_exception()) as exc:
            raise HostUnreachable(f"connection to {self._where()} lost: {exc}") from None

    def put(self, local: str | os.PathLike[str], remote: str) -> None:
        self.open()
        self._conn.put(str(local), remote)

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        self.open()
        self._conn.get(remote, str(local))

    def sftp(self) -> Any:
        """The paramiko SFTP client of this connection (for SFTP cache stores)."""
        self.open()
        return self._conn.sftp()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _ssh_exception() -> type[Exception]:
    from paramiko.ssh_exception import SSHException

    return SSHException


#: Seconds to wait for the channel's EOF after the exit status arrived (see _exec).
_EOF_GRACE = 5.0


def _exec(transport: Any, command: str, stdin: str | None, timeout: float | None) -> CommandResult:
    """Run one command on an SSH transport: stdin sent whole, stdout/stderr read as they come."""
    chan = transport.open_session()
    chan.exec_command(command)
    sender: threading.Thread | None = None
    if stdin:
        data = stdin.encode()

        def send() -> None:
            try:
                chan.sendall(data)
                chan.shutdown_write()
            except OSError:
                pass  # the command exited without reading all of its stdin

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
    else:
        chan.shutdown_write()
    out, err = bytearray(), bytearray()
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
        if deadline is not None and time.monotonic() > deadline:
            chan.close()
            return CommandResult(
                command, out.decode(errors="replace"), err.decode(errors="replace"), 124
            )
        if not busy:
            time.sleep(0.005)
    code = chan.recv_exit_status()
    chan.close()
    if sender is not None:
        sender.join(timeout=1)
    return CommandResult(command, out.decode(errors="replace"), err.decode(errors="replace"), code)


def connect(host: Host, options: ConnectOptions) -> Connection:
    """The connection a host needs: local for `ansible_connection: local`, else SSH."""
    return LocalConnection(host) if host.is_local else SSHConnection(host, options)


class HostKeyError(Exception):
    """Raised by our missing-host-key policies; turned into HostUnreachable."""


def _fingerprint(key: Any) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return f"{key.get_name()} SHA256:{base64.b64encode(digest).decode().rstrip('=')}"


def _known_hosts_name(host: Host) -> str:
    return f"[{host.address}]:{host.port}" if host.port and host.port != 22 else host.address


def _policy_base() -> type:
    import paramiko

    return paramiko.MissingHostKeyPolicy


class _RejectPolicy(_policy_base()):  # type: ignore[misc]
    """Unknown host keys are refused: trust must be explicit."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        raise HostKeyError(
            f"host key of {hostname} ({_fingerprint(key)}) is not in {self.known_hosts}; "
            "verify it and add it (ssh-keyscan), or pass --accept-new-host-keys to trust it "
            "on first use"
        )


class _AcceptNewPolicy(_policy_base()):  # type: ignore[misc]
    """Trust on first use: record a new key in known_hosts; changed keys are still refused."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        import fcntl

        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _KNOWN_HOSTS_LOCK:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.known_hosts, "a", encoding="ascii") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                fh.write(line)
