"""Preflight's warm resolution server: the engine (sglang, vLLM: its in-env resolver,
``targets.RESOLVE_SERVERS``) imported once in the serving env, each launch resolved and checked
in a child forked from it (``in_target/resolve_server.py``).

The server is keyed by everything its imported state depends on: the interpreter, the env's
installed distributions (names, versions, the site-packages directory's mtime, which any
install or removal changes), the GPU it presents (capability, memory), whether the host has a
driver, the process environment (SSH_* and shell bookkeeping left out), the engine's resolver
and the server's own source. Another key is another server. It listens on ``<tmp>/sm120kit-preflight-<uid>/<key>``,
a directory only this user may enter (checked before use), and exits after ``idle`` seconds
without a request. Whatever fails here (no socket, a dead server, a slow start) is answered
None: the caller then runs a fresh interpreter, as without a server.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import tempfile
import time
from typing import Any

from sm120kit.remote.lib.targets import RESOLVE_SERVERS

#: Longest unix socket path Linux binds (sun_path is 108 bytes, NUL included), less the
#: ``.<pid>`` suffix a server binds first: a longer TMPDIR means no warm server.
MAX_SOCKET_PATH = 96
#: Environment variables that differ between two SSH sessions of one user, and change nothing
#: sglang reads.
_VOLATILE = ("PWD", "OLDPWD", "_", "SHLVL", "TERM", "XDG_SESSION_ID", "MOTD_SHOWN", "LS_COLORS")


def socket_dir() -> str | None:
    """This user's directory for the servers' sockets (made 0700), or None when it exists but
    is not this user's alone (a socket another user could serve must not be trusted)."""
    path = os.path.join(tempfile.gettempdir(), "sm120kit-preflight-%d" % os.getuid())
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return path


def server_key(
    python: str, site: str | None, fingerprint: Any, gpu: Any, resolver: str = "server_args"
) -> str:
    """The key of the server for this env, GPU, environment and engine's resolver (see the
    module doc)."""
    try:
        site_mtime = os.stat(site).st_mtime_ns if site else None
    except OSError:
        site_mtime = None
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SSH_") and k not in _VOLATILE and k != "LD_LIBRARY_PATH"
    }
    parts = [
        os.path.abspath(python),
        os.path.realpath(python),
        site,
        site_mtime,
        fingerprint,
        gpu,
        sorted(env.items()),
        os.environ.get("LD_LIBRARY_PATH"),
        resolver,
        hashlib.sha256(RESOLVE_SERVERS[resolver].encode()).hexdigest(),
    ]
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]


def ask(path: str, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """The server's answer to `request` (one JSON line each way), or None (no server there,
    or it gave no answer in `timeout` seconds)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2.0)
        sock.connect(path)
        sock.settimeout(timeout)
        sock.sendall((json.dumps(dict(request, timeout=timeout)) + "\n").encode())
        raw = b""
        while b"\n" not in raw:
            got = sock.recv(1 << 16)
            if not got:
                return None
            raw += got
        doc = json.loads(raw.split(b"\n", 1)[0].decode())
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def start(
    python: str,
    path: str,
    args: dict[str, Any],
    env: dict[str, str] | None,
    stub_dir: str | None,
    driver: str,
    idle: float,
    timeout: float,
    resolver: str = "server_args",
) -> bool:
    """Start a server for `path` (detached, in its own session: the SSH channel closing does not
    end it) and wait up to `timeout` s for it to listen. It owns `stub_dir` (removes it at its
    exit). False: it did not come up (the caller runs fresh; the server, if alive, idles out)."""
    server_args = {
        "socket": path,
        "idle": idle,
        "timeout": timeout,
        "stub_dir": stub_dir,
        "driver": driver,
        "cc": args.get("cc"),
        "memory_mib": args.get("memory_mib"),
    }
    try:
        with open(path + ".log", "w") as log:
            proc = subprocess.Popen(
                [python, "-c", RESOLVE_SERVERS[resolver], json.dumps(server_args)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
    except OSError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def _is_key(name: str) -> bool:
    return len(name) == 32 and all(ch in "0123456789abcdef" for ch in name)


def stop_all(timeout: float = 10.0) -> dict[str, Any]:
    """Stop every warm server of this user (`preflight --stop-warm`): each socket of
    `socket_dir()` is asked to stop, and waited for (at most `timeout` s in all) until its name
    is gone; a name no server answers on is a stale one and removed. Idempotent: with none
    left, {"stopped": [], "stale": 0}. {"stopped": [pid, ...], "stale": n, "error": None}."""
    out: dict[str, Any] = {"stopped": [], "stale": 0, "error": None}
    where = socket_dir()
    if where is None:
        out["error"] = "the warm servers' directory is not this user's alone: left as it is"
        return out
    deadline = time.monotonic() + timeout
    for name in sorted(os.listdir(where)):
        path = os.path.join(where, name)
        if not _is_key(name):
            continue
        doc = ask(path, {"stop": True}, max(0.5, deadline - time.monotonic()))
        if doc is not None and doc.get("stopped"):
            out["stopped"].append(doc.get("pid"))
            while os.path.exists(path) and time.monotonic() < deadline:
                time.sleep(0.05)
        else:
            try:
                os.unlink(path)
                out["stale"] += 1
            except OSError:
                pass
        try:
            os.unlink(path + ".log")
        except OSError:
            pass
    return out
