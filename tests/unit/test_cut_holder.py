"""A holder that cut a taker short while the file was still arriving there is asked again
once it has the whole file, before the taker falls back to the stores and the index
(cache/peers.py `Peers.claim` ``until_whole``, ops/stack_files.py). A growing file's stream
can be cut for reasons that say nothing about the file the holder ends up with (its own
download stalled or was cut, a length it did not know yet: tests/fleet/test_sizeless_fanout.py);
what it holds whole it serves from its disk. A holder that failed with the whole file, or
whose own download failed, is not asked again."""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.cache.peers import Peers

#: Steps on one Peers: ("claim", host, expected holder or None, avoid, until_whole[, wait]),
#: ("receiving", host), ("placed", host, ok), ("uploaded", host).
CASES: dict[str, list[tuple[Any, ...]]] = {
    "cut while arriving: not offered until whole, then offered again": [
        ("claim", "a", None, (), ()),
        ("receiving", "a"),
        ("claim", "b", "a", (), ()),
        ("placed", "b", False),  # a's stream to b was cut
        ("uploaded", "a"),
        ("claim", "b", None, (), ("a",), 0.0),  # a is still receiving: b waits for it
        ("placed", "a", True),
        ("claim", "b", "a", (), ("a",)),  # whole now: asked again, not the index
    ],
    "cut while arriving, and its own download failed: the taker downloads": [
        ("claim", "a", None, (), ()),
        ("receiving", "a"),
        ("claim", "b", "a", (), ()),
        ("placed", "b", False),
        ("uploaded", "a"),
        ("placed", "a", False),  # a never got the file
        ("claim", "b", None, (), ("a",)),  # b is the one to download it now
        ("claim", "c", None, (), (), 0.0),  # c waits for b's download, not a second one
        ("receiving", "b"),
        ("claim", "c", "b", (), ()),
    ],
    "cut while arriving, another holder whole meanwhile: that one first": [
        ("claim", "a", None, (), ()),
        ("receiving", "a"),
        ("claim", "b", "a", (), ()),
        ("placed", "c", True),  # an earlier run's holder, started for this run
        ("placed", "b", False),
        ("uploaded", "a"),
        ("claim", "b", "c", (), ("a",)),
    ],
    "failed with the whole file: never asked again": [
        ("claim", "a", None, (), ()),
        ("placed", "a", True),
        ("claim", "b", "a", (), ()),
        ("placed", "b", False),
        ("uploaded", "a"),
        ("claim", "b", None, ("a",), ()),
    ],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_holder_cut_while_arriving_is_asked_again_once_whole(case: str) -> None:
    peers = Peers()
    for i, name in enumerate("abc"):
        peers.serving(name, f"http://127.0.0.{2 + i}:1/t")
    for step in CASES[case]:
        kind, host = step[0], step[1]
        if kind == "claim":
            wait = step[5] if len(step) > 5 else 5.0
            got = peers.claim("s", host, wait_s=wait, avoid=step[3], until_whole=step[4])
            assert got == step[2], (case, step)
        elif kind == "receiving":
            peers.receiving("s", host)
        elif kind == "placed":
            peers.placed("s", host, step[2])
        else:
            peers.uploaded(host)
