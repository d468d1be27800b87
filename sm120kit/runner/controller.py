"""Who this controller process is, and whether a process a lock names is still alive here.

A lock records the controller's host name, its boot id (a fresh random id per Linux boot,
/proc/sys/kernel/random/boot_id) and the pid with that process's start time. A holder
recorded by this same controller (same host name and boot id) whose process is gone (or
whose pid now belongs to a process started at another time) is dead for certain, so its
lock can be taken over at once instead of after the stale timeout.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from functools import cache
from typing import Any


@cache
def boot_id() -> str:
    """This machine's boot id ("" where the kernel does not expose one)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def pid_start(pid: int) -> str:
    """The start time of process `pid` (clock ticks since boot, /proc/PID/stat field 22), or ""."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except (OSError, ValueError):
        return ""
    # comm (field 2) may hold spaces and parentheses: split after its closing parenthesis.
    fields = stat.rpartition(")")[2].split()
    if len(fields) < 20 or fields[0] == "Z":
        return ""  # a zombie has finished: it is dead for our purposes
    return fields[19]


def identity() -> dict[str, Any]:
    """This process as a lock records it: controller host, boot id, pid and pid start time."""
    return {
        "controller": socket.gethostname(),
        "boot_id": boot_id(),
        "pid": os.getpid(),
        "pid_start": pid_start(os.getpid()),
    }


def dead_here(holder: Mapping[str, Any], controller_key: str = "controller") -> bool:
    """True when `holder` was recorded by this controller (same host name and boot id) and
    its process is gone; False when it lives, or belongs to another controller or boot."""
    if not holder.get("boot_id") or holder.get("boot_id") != boot_id():
        return False
    if holder.get(controller_key) != socket.gethostname():
        return False
    try:
        pid = int(holder.get("pid", 0))
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    started = pid_start(pid)
    if not started:
        return True
    recorded = str(holder.get("pid_start") or "")
    return bool(recorded) and recorded != started
