"""The smoke probe's fork servers: the in-target scripts run in children forked from one
interpreter of the env (``in_target/fork_server.py``) instead of one fresh interpreter each.

Each check still gets an interpreter of its own, in the state the check needs: a child of the
torch server is ``python -c "import torch; <check>"`` after its first line (torch imported
once for all of them); a child of the bare server is a fresh interpreter (an import-order
check "alone"). What a child loads never reaches another check, so the verdicts are those of
fresh interpreters; the cost of ``import torch`` is paid once instead of once per check.

Whatever a server cannot do is done the old way, by the caller (`Servers.run` answers None):
the torch server is not used when ``import torch`` failed there (a second import of a failed
torch may fail otherwise than a first), and a server that died answers nothing more.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from typing import Any

from sm120kit.remote.lib.diagnosis import short_error
from sm120kit.remote.lib.targets import MARK, run_target, script_text, target_source

#: The scripts a child may run, by name (``in_target/<name>.py``, after the prelude).
FORKED = ("load", "loader_eval", "import_top")
SERVER_SRC = target_source("fork_server")


class ForkServer:
    """One fork server in the env's interpreter; `run` sends it a check and waits for the answer."""

    def __init__(self, python: str, with_torch: bool, work: str, timeout: float) -> None:
        self.with_torch = with_torch
        self.ready: dict[str, Any] | None = None
        self.error: str | None = None
        self.started = 0  # checks run in children
        self._answers: dict[int, dict[str, Any]] = {}
        self._events: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._next = 0
        self._up = threading.Event()
        self._timeout = timeout
        scripts = {name: script_text(name) for name in (*FORKED, "torch_info")}
        args = {"with_torch": with_torch, "scripts": scripts, "work": work}
        self._err = open(os.path.join(work, "server-%d.err" % int(with_torch)), "w")  # noqa: SIM115
        try:
            self.proc: subprocess.Popen[str] | None = subprocess.Popen(
                [python, "-c", SERVER_SRC, json.dumps(args)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._err,
                text=True,
            )
        except OSError as exc:
            self.proc, self.error = None, f"cannot run {python}: {exc}"
            self._up.set()
            return
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith(MARK):
                continue
            try:
                doc = json.loads(line[len(MARK) :])
            except ValueError:
                continue
            if doc.get("ready"):
                self.ready = doc
                self._up.set()
                continue
            with self._lock:
                self._answers[doc["id"]] = doc
                event = self._events.get(doc["id"])
            if event is not None:
                event.set()
        # EOF: the server is gone; every check still waiting is answered "none".
        with self._lock:
            if self.error is None:
                self.error = "fork server exited"
            events = list(self._events.values())
        self._up.set()
        for event in events:
            event.set()

    def wait_ready(self) -> dict[str, Any] | None:
        """The server's ready line (with torch's answer), or None when it never started."""
        self._up.wait(self._timeout)
        return self.ready

    def usable(self) -> bool:
        """Whether checks may be forked from it: it runs, and its torch imported (if any)."""
        ready = self.wait_ready()
        if ready is None or self.proc is None or self.error is not None:
            return False
        return not (self.with_torch and (ready.get("torch_info") or {}).get("error"))

    def run(
        self, script: str, args: dict[str, Any], timeout: float
    ) -> tuple[dict[str, Any] | None, str | None] | None:
        """(result, None) or (None, one-line failure) as `run_target` answers; None when the
        server could not run it (the caller runs a fresh interpreter instead)."""
        if not self.usable():
            return None
        event = threading.Event()
        with self._lock:
            self._next += 1
            jid = self._next
            self._events[jid] = event
            line = json.dumps({"id": jid, "script": script, "args": args, "timeout": timeout})
            try:
                assert self.proc is not None and self.proc.stdin is not None
                self.proc.stdin.write(line + "\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):
                self.error = self.error or "fork server gone"
                return None
            self.started += 1
        event.wait(timeout + 60)
        with self._lock:
            doc = self._answers.pop(jid, None)
            del self._events[jid]
        if doc is None:
            return None
        return answer(doc)

    def close(self) -> None:
        """End the server (stdin closed: it finishes its children and exits)."""
        if self.proc is not None:
            try:
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                self.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._err.close()


def answer(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A server's answer as `run_target`'s: the result, else why none came, worded the same."""
    if doc.get("result") is not None:
        return doc["result"], None
    if doc.get("error"):
        return None, str(doc["error"])
    if doc.get("signal"):
        return None, f"killed by signal {doc['signal']}"
    return None, short_error(doc.get("stderr") or f"exit {doc.get('exit')}")


class Servers:
    """The probe's two fork servers (with torch, and bare) for one env, and the routing of a
    check to the one whose state it needs; counts what ran where."""

    def __init__(self, python: str, timeout: float, enabled: bool = True) -> None:
        self.python = python
        self.timeout = timeout
        self.fresh = 0  # checks run in a fresh interpreter
        self._lock = threading.Lock()
        self._work = tempfile.mkdtemp(prefix="sm120kit-smoke-")
        self.torch: ForkServer | None = None
        self.bare: ForkServer | None = None
        if enabled:
            self.torch = ForkServer(python, True, self._work, timeout)
            self.bare = ForkServer(python, False, self._work, timeout)

    def pick(self, script: str, args: dict[str, Any]) -> ForkServer | None:
        """The server a check runs in: with torch imported for an import after torch, the
        loader's evaluation and a stubbed import; bare for an import alone."""
        if script == "load":
            return self.torch if args.get("with_torch") else self.bare
        if script == "loader_eval":
            return self.torch  # its first step (_fake_gpu) is `import torch`
        if script == "import_top":
            return self.torch if args.get("stub") else self.bare
        return None

    def run(
        self, script: str, src: str, args: dict[str, Any], timeout: float | None = None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Run in-target script `script` (its full program `src`) in its server, else fresh."""
        limit = self.timeout if timeout is None else timeout
        server = self.pick(script, args)
        got = server.run(script, args, limit) if server is not None else None
        if got is not None:
            return got
        with self._lock:
            self.fresh += 1
        return run_target(self.python, src, args, limit)

    def counts(self) -> dict[str, int]:
        """``{"interpreters", "forked"}``: processes started for the checks."""
        servers = [s for s in (self.torch, self.bare) if s is not None and s.proc is not None]
        return {
            "interpreters": self.fresh + len(servers),
            "forked": sum(s.started for s in servers),
        }

    def close(self) -> None:
        """End both servers and remove their scratch directory."""
        for server in (self.torch, self.bare):
            if server is not None:
                server.close()
        shutil.rmtree(self._work, ignore_errors=True)
