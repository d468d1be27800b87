"""memo.once: a derivation computed once per arguments, also when many threads ask at the
same moment (the hosts of a run bundling the same remote script), errors never stored."""

from __future__ import annotations

import threading
import time

import pytest

from sm120kit.memo import Same, once


@pytest.mark.parametrize("threads", [1, 2, 8, 32])
def test_concurrent_callers_compute_once(threads: int) -> None:
    calls: list[int] = []

    @once
    def slow(x: int) -> list[int]:
        calls.append(x)
        time.sleep(0.05)  # every other thread arrives while the first computes
        return [x, x]

    start = threading.Barrier(threads)
    got: list[list[int]] = []

    def ask() -> None:
        start.wait()
        got.append(slow(3))

    pool = [threading.Thread(target=ask) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(10)
    assert calls == [3]
    assert len(got) == threads and all(g is got[0] for g in got)


@pytest.mark.parametrize(
    ("calls", "computed"),
    [
        ([(1,), (1,), (2,)], [1, 2]),
        ([(1,), (2,), (1,), (2,)], [1, 2]),
        ([((1, 2),), ((1, 2),)], [(1, 2)]),
    ],
)
def test_one_value_per_arguments(calls: list[tuple[object, ...]], computed: list[object]) -> None:
    seen: list[object] = []

    @once
    def f(x: object) -> object:
        seen.append(x)
        return x

    assert [f(*a) for a in calls] == [a[0] for a in calls]
    assert seen == computed


def test_an_error_is_raised_to_the_caller_and_not_stored() -> None:
    tries: list[int] = []

    @once
    def flaky() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise OSError("first try fails")
        return "ok"

    with pytest.raises(OSError, match="first try"):
        flaky()
    assert flaky() == "ok" and flaky() == "ok"
    assert len(tries) == 2


def test_same_compares_by_identity() -> None:
    a, b = {"k": 1}, {"k": 1}  # equal, unhashable, not the same object
    assert Same((a,)) == Same((a,)) and hash(Same((a,))) == hash(Same((a,)))
    assert Same((a,)) != Same((b,))
    assert Same((a,)) != Same((a, a))
