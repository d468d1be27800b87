"""The sha256 of a range-split download is computed as the prefix from the file's start
grows (remote/lib/ranges.py `_Prefix`), whatever order the ranges' blocks arrive in: a real
file written at its offsets, no server (the download itself: tests/unit/test_range_fetch.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from sm120kit.remote.lib import ranges

DATA = bytes(range(256)) * 4096 + b"tail"  # 1 MiB and 4 bytes


def _write_in(order: list[tuple[int, int]], path: Path, parts: int) -> tuple[ranges._Prefix, int]:
    """Write DATA's spans in `order` ((span index, block length) steps) through a `_Prefix`;
    return it and how many bytes it had hashed before its `hexdigest`."""
    spans = ranges.bounds(len(DATA), parts)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, len(DATA))
    prefix = ranges._Prefix(spans, None, fd)
    written = [0] * len(spans)
    for index, n in order:
        first, last = spans[index]
        start = first + written[index]
        n = min(n, last + 1 - start)
        os.pwrite(fd, DATA[start : start + n], start)
        written[index] += n
        prefix.add(index, n)
    return prefix, fd


def _steps(parts: int, block: int, order: str) -> list[tuple[int, int]]:
    spans = ranges.bounds(len(DATA), parts)
    each = [
        [(i, block)] * (-(-(last - first + 1) // block)) for i, (first, last) in enumerate(spans)
    ]
    if order == "in order":
        return [s for steps in each for s in steps]
    if order == "last first":
        return [s for steps in reversed(each) for s in steps]
    out = []  # by turns, as concurrent range threads report
    while any(each):
        for steps in each:
            if steps:
                out.append(steps.pop(0))
    return out


@pytest.mark.parametrize("order", ["in order", "last first", "by turns"])
@pytest.mark.parametrize("parts,block", [(1, 4096), (2, 100_000), (4, 65_536), (3, 1 << 20)])
def test_the_prefix_is_hashed_as_it_grows(
    tmp_path: Path, order: str, parts: int, block: int
) -> None:
    prefix, fd = _write_in(_steps(parts, block, order), tmp_path / "f.part", parts)
    try:
        # Every byte was hashed as the prefix reached it: nothing left for a second pass.
        assert prefix.hashed == len(DATA)
        assert prefix.hexdigest(len(DATA)) == hashlib.sha256(DATA).hexdigest()
    finally:
        os.close(fd)


def test_a_short_file_has_no_digest(tmp_path: Path) -> None:
    steps = _steps(2, 65_536, "in order")[:-1]  # the last block never came
    prefix, fd = _write_in(steps, tmp_path / "f.part", 2)
    try:
        os.ftruncate(fd, prefix.prefix)  # the file ends where the bytes did
        assert prefix.hexdigest(len(DATA)) is None
    finally:
        os.close(fd)
