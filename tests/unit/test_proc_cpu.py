"""The bench's CPU split per kind of process (bench/proc_cpu.py): its pure rules on real
``/proc/<pid>/stat`` line shapes, and one real sample of this test's own process tree."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("proc_cpu", REPO / "bench" / "proc_cpu.py")
assert _spec is not None and _spec.loader is not None
proc_cpu = importlib.util.module_from_spec(_spec)
sys.modules["proc_cpu"] = proc_cpu  # its dataclass looks itself up there
_spec.loader.exec_module(proc_cpu)
TICK, Sampler, kind_of, parse_stat = (
    proc_cpu.TICK, proc_cpu.Sampler, proc_cpu.kind_of, proc_cpu.parse_stat)  # fmt: skip


def _stat(comm: str, ppid: int, ticks: tuple[int, int, int, int]) -> str:
    u, s, cu, cs = ticks
    rest = ["S", str(ppid)] + ["0"] * 9 + [str(u), str(s), str(cu), str(cs)] + ["0"] * 30
    return f"4242 ({comm}) " + " ".join(rest)


@pytest.mark.parametrize(
    "comm,ppid,ticks",
    [
        ("python3", 1, (10, 5, 0, 0)),
        ("sshd-session", 77, (1, 2, 300, 400)),
        ("a (weird) name", 9, (TICK, TICK, 0, 0)),  # parentheses and spaces in comm
    ],
)
def test_parse_stat(comm: str, ppid: int, ticks: tuple[int, int, int, int]) -> None:
    got = parse_stat(_stat(comm, ppid, ticks))
    assert got == (ppid, comm, (ticks[0] + ticks[1]) / TICK, (ticks[2] + ticks[3]) / TICK)


@pytest.mark.parametrize(
    "comm,cmdline,parent,controller,kind",
    [
        ("python3", "python3 -m invoke provision", "", True, "controller"),
        ("sshd-session", "sshd-session: root@notty", "sshd", False, "sshd"),
        ("sshd", "/usr/sbin/sshd -D -f x", "", False, "sshd"),
        ("uv", "/w/tools/uv-0.13.9/uv pip install", "stack script", False, "uv"),
        ("python", "/env/bin/python -c \nimport compileall, json", "stack script", False,
         "compile workers"),
        ("python3", "python3 -S -c import sys; b = sys.stdin.buffer; n = int(b.readline()); "
         "exec(compile(b.read(n)", "shell commands", False, "downloader service"),
        ("python3", "python3 -", "stack script", False, "verify"),
        ("python3", "python3 -", "shell commands", False, "scripts"),
        ("bash", "bash -c mkdir -p x", "sshd", False, "shell commands"),
    ],
)  # fmt: skip
def test_kind_of(comm: str, cmdline: str, parent: str, controller: bool, kind: str) -> None:
    assert kind_of(comm, cmdline, parent, controller) == kind


def test_a_sample_of_a_real_tree_counts_its_busy_child() -> None:
    """A real child that spins for a while is seen, and its CPU lands in its kind."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.process_time()\n"
         "while time.process_time() - t < 0.3: pass\ntime.sleep(0.5)"]
    )  # fmt: skip
    sampler = Sampler([child.pid], interval=0.05)
    sampler.start()
    child.wait(30)
    sampler.stop()
    kinds = sampler.kinds()
    assert kinds.get("scripts", 0) >= 0.2
