"""One runner for the tables of `cache.peers.Peers` steps (the holder choice, no host)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sm120kit.cache.peers import Peers

#: A step: ("claim", host, expected holder or None, avoid[, claim's keyword args]),
#: ("receiving", host), ("placed", host, ok), ("uploaded", host), ("leave", host).
Step = tuple[Any, ...]


def play(case: str, steps: Sequence[Step], hosts: str = "abcde") -> None:
    """Run `steps` on one Peers whose `hosts` serve; each claim must give its holder.
    A claim waits 5 s unless its keyword args say ``wait_s``."""
    peers = Peers()
    for i, name in enumerate(hosts):
        peers.serving(name, f"http://127.0.0.{2 + i}:1/t")
    for step in steps:
        kind, host = step[0], step[1]
        if kind == "claim":
            opts = {"wait_s": 5.0, **(step[4] if len(step) > 4 else {})}
            got = peers.claim("s", host, avoid=step[3], **opts)
            assert got == step[2], (case, step)
        elif kind == "receiving":
            peers.receiving("s", host)
        elif kind == "placed":
            peers.placed("s", host, step[2])
        elif kind == "uploaded":
            peers.uploaded(host)
        else:
            peers.leave(host, wait_s=0)
