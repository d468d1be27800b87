"""Where a provision's CPU-seconds go, per kind of process, on this machine (Linux /proc).

The bench's SSH host is a real sshd on loopback, so the controller and every process the
host runs for it are on this one machine: a `Sampler` reads ``/proc/<pid>/stat`` of every
process descended from its roots (the provision's controller process and the host's sshd)
a few times a second and keeps each one's latest CPU time (user + system), its parent and
its command line. At the end each process is put in a kind (`kind_of`): the controller,
sshd, the host's downloader service, the stack script (``install_lock``), its uv runs, its
compile workers, its verify processes, other scripts and shell commands. CPU spent by
processes too short-lived to be seen (a shell of one ``ctx.run``) reaches the sshd master's
``cutime`` once reaped; `Sampler.unseen` is that remainder (the tree's total less what was
seen), so the kinds add up to the whole.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

#: Clock ticks per second of /proc's CPU times.
TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: What starts a service on the host (runner/service.py's loader): its command line.
SERVICE_MARK = "b.read(n)"
#: The compile worker's program (remote/lib/stream_install.py WORKER): its command line.
WORKER_MARK = "import compileall"


@dataclass
class Proc:
    """One process as last seen: its parent, name, command line, CPU (s), reaped children's
    CPU (s)."""

    pid: int
    ppid: int
    comm: str
    cmdline: str
    cpu: float
    child_cpu: float
    children: list[int] = field(default_factory=list)


def parse_stat(text: str) -> tuple[int, str, float, float]:
    """(ppid, comm, own CPU s, reaped children's CPU s) from a ``/proc/<pid>/stat`` line
    (comm may hold spaces and parentheses: it is what lies between the first ``(`` and the
    last ``)``)."""
    comm = text[text.index("(") + 1 : text.rindex(")")]
    rest = text[text.rindex(")") + 2 :].split()
    # fields after comm: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based
    ppid = int(rest[1])
    own = (int(rest[11]) + int(rest[12])) / TICK
    kids = (int(rest[13]) + int(rest[14])) / TICK
    return ppid, comm, own, kids


def kind_of(comm: str, cmdline: str, parent_kind: str, is_controller: bool = False) -> str:
    """The kind of one process, from its name, command line and its parent's kind."""
    if is_controller:
        return "controller"
    if comm.startswith("sshd"):
        return "sshd"
    if comm == "uv":
        return "uv"
    if WORKER_MARK in cmdline:
        return "compile workers"
    if "python" in comm or "python" in cmdline.split(" ", 1)[0]:
        if SERVICE_MARK in cmdline:
            return "downloader service"
        if parent_kind in ("stack script", "verify"):
            return "verify"  # the stack script's forked verify pool
        return "scripts"
    return "shell commands"


def _read(pid: int) -> Proc | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmd = (
            Path(f"/proc/{pid}/cmdline")
            .read_bytes()
            .replace(b"\0", b" ")
            .decode("utf-8", "replace")
        )
    except (OSError, ValueError):
        return None
    try:
        ppid, comm, own, kids = parse_stat(stat)
    except (ValueError, IndexError):
        return None
    return Proc(pid, ppid, comm, cmd.strip(), own, kids)


class Sampler(threading.Thread):
    """Samples every process under `roots` (pids) every `interval` seconds until `stop`."""

    def __init__(self, roots: list[int], controller: int | None = None, interval: float = 0.2):
        threading.Thread.__init__(self, daemon=True)
        self.roots, self.controller, self.interval = list(roots), controller, interval
        self.seen: dict[int, Proc] = {}
        self.base: dict[int, tuple[float, float]] = {}  # each root's CPU at the start
        self.halt = threading.Event()
        for pid in self.roots:
            p = _read(pid)
            if p is not None:
                self.base[pid] = (p.cpu, p.child_cpu)

    def sample(self) -> None:
        tree: dict[int, Proc] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                p = _read(int(name))
                if p is not None:
                    tree[p.pid] = p
        inside = set(pid for pid in self.roots if pid in tree)
        grew = True
        while grew:  # descendants of the roots
            grew = False
            for p in tree.values():
                if p.pid not in inside and p.ppid in inside:
                    inside.add(p.pid)
                    grew = True
        for pid in inside:
            p = tree[pid]
            old = self.seen.get(pid)
            if old is not None and old.comm == p.comm and p.cpu < old.cpu:
                continue  # a new process of a reused pid is seen with its own name
            if old is not None and not p.cmdline and old.comm == p.comm:
                p.cmdline = old.cmdline  # a zombie's command line reads empty
            self.seen[pid] = p

    def run(self) -> None:
        while not self.halt.is_set():
            self.sample()
            self.halt.wait(self.interval)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
        self.sample()

    def kinds(self) -> dict[str, float]:
        """CPU seconds per kind over the sampled time (the roots' own CPU before the start
        left out), and ``unseen``: what the roots' reaped children used beyond what was seen
        of them (processes that came and went between two samples)."""
        out: dict[str, float] = {}
        kind: dict[int, str] = {}

        def resolve(pid: int) -> str:
            if pid in kind:
                return kind[pid]
            p = self.seen[pid]
            parent = resolve(p.ppid) if p.ppid in self.seen and p.pid not in self.roots else ""
            k = kind_of(p.comm, p.cmdline, parent, pid == self.controller)
            if k == "scripts" and any(
                self.seen[c].comm == "uv" or WORKER_MARK in self.seen[c].cmdline
                for c in self.seen
                if self.seen[c].ppid == pid
            ):
                k = "stack script"  # install_lock: the parent of the uv runs and workers
            kind[pid] = k
            return k

        for pid, p in self.seen.items():
            k = resolve(pid)
            own0 = self.base.get(pid, (0.0, 0.0))[0]
            out[k] = out.get(k, 0.0) + max(0.0, p.cpu - own0)
        # Reaped-and-unseen: the roots' children's CPU (every level waits for its own)
        # beyond the non-root processes seen.
        reaped = sum(
            max(0.0, self.seen[pid].child_cpu - self.base.get(pid, (0.0, 0.0))[1])
            for pid in self.roots
            if pid in self.seen
        )
        seen_below = sum(
            max(0.0, p.cpu - self.base.get(pid, (0.0, 0.0))[0])
            for pid, p in self.seen.items()
            if pid not in self.roots and not _alive(pid)
        )
        out["unseen"] = max(0.0, reaped - seen_below)
        return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CPU-seconds of a command's processes, per kind")
    parser.add_argument("--also", type=int, action="append", default=[],
                        help="another root pid to follow (e.g. an sshd's)")  # fmt: skip
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    proc = subprocess.Popen(args.command)
    sampler = Sampler([proc.pid, *args.also], proc.pid)
    sampler.start()
    code = proc.wait()
    sampler.stop()
    print(", ".join(f"{k} {v}" for k, v in sampler.kinds().items()))
    return code


if __name__ == "__main__":
    sys.exit(main())
