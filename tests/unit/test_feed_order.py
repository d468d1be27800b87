"""The stack step's order of work by what feeds the host's compile workers: the controller's
fetch order from the catalogue's ``py_files`` (plays/stack.py fetch_order), the host's uv
batches (remote/lib/stream_install.py take_batch: a big file that feeds the workers goes
alone), and the catalogue's ``py_files`` fact itself (read from the wheel, kept by
dump/parse). Facts in, order out: tables."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from sm120kit.errors import RecipeError
from sm120kit.plays.stack import FILE_COST_BYTES, fetch_order, py_files_of
from sm120kit.remote.lib import stream_install
from sm120kit.remote.lib.stream_install import BATCH_BYTES, take_batch
from sm120kit.stack import catalogue
from sm120kit.stack.catalogue_read import read_wheel
from sm120kit.stack.lock import load_lock
from tests.support.tiny_index import make_wheel, sha256_of

MB = 1 << 20
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("sizes", "modules", "order"),
    [
        # modules per (size + FILE_COST_BYTES), most first; nothing-feeders last, largest first
        ([555 * MB, 39 * MB, 2 * MB, 553 * MB], [2438, 4719, 3349, 0], [2, 1, 0, 3]),
        # small files of few modules go after a big file of thousands (the per-file cost)
        ([1 * MB, 555 * MB, 1 * MB], [20, 2438, 30], [1, 2, 0]),
        # light files: largest first, ties in the lock's order
        ([100 * MB, 400 * MB, 400 * MB, 5 * MB], [0, 0, 0, 100], [3, 1, 2, 0]),
        # equal ratio: the bigger first
        ([FILE_COST_BYTES, 3 * FILE_COST_BYTES], [200, 400], [1, 0]),
        ([], [], []),
    ],
)
def test_fetch_order_by_modules_per_byte(
    sizes: list[int], modules: list[int | None], order: list[int]
) -> None:
    assert fetch_order(sizes, None, modules) == order


@pytest.mark.parametrize(
    "modules",
    [None, [10, None, 5, 0, 7], [None] * 5],
)
def test_fetch_order_without_every_count_is_the_size_order(
    modules: list[int | None] | None,
) -> None:
    """A file the catalogue does not count: the order without counts (largest first, then
    pure wheels, then by turns), not a guess at the missing count."""
    sizes = [5 * MB, 900 * MB, 2 * MB, 700 * MB, 1 * MB]
    pure = [True, False, False, False, True]
    assert fetch_order(sizes, pure, modules) == fetch_order(sizes, pure)
    assert fetch_order(sizes, pure)[:3] == [1, 3, 0]


def e(name: str, mb: float, modules: int) -> dict[str, object]:
    return {"name": name, "size": int(mb * MB), "modules": modules}


TORCH = e("torch", 555, 2438)
SGLANG = e("sglang", 39, 4719)
CUDNN = e("cudnn", 553, 0)
CUBLAS = e("cublas", 423, 0)


@pytest.mark.parametrize(
    ("pending", "backlog", "batch"),
    [
        # a big file that feeds the workers is a batch of its own, not one of 54 files
        ([e("a", 1, 30), TORCH, e("b", 2, 20)], 2500, ["a", "b"]),
        ([TORCH, e("b", 5, 1)], 2500, ["torch"]),
        ([TORCH, CUDNN, CUBLAS], 2500, ["torch"]),
        ([TORCH], 0, ["torch"]),
        # denser files first still: they end the batch before torch
        ([TORCH, SGLANG], 2500, ["sglang"]),
        # light big files are not alone: all pending light, all at once
        ([CUDNN, CUBLAS], 0, ["cudnn", "cublas"]),
        # under the alone size: batched as before
        ([e("mid", 200, 300), e("b", 1, 50)], 2500, ["b", "mid"]),
    ],
)
def test_take_batch_a_big_feeder_alone(
    pending: list[dict[str, object]], backlog: int, batch: list[str]
) -> None:
    assert [x["name"] for x in take_batch(pending, backlog)] == batch


def test_alone_is_bigger_than_a_batch_and_not_light() -> None:
    assert stream_install.alone(e("x", BATCH_BYTES / MB + 1, 300))
    assert not stream_install.alone(e("x", BATCH_BYTES / MB, 3000))
    assert not stream_install.alone(e("x", 900, 100))  # 0.1 per MB: light


def test_py_files_read_from_the_wheel_and_kept_by_dump(tmp_path: Path) -> None:
    """The catalogue's reader counts the wheel's .py files; dump writes it, parse reads it."""
    wheel = make_wheel(
        tmp_path, "demo", "1.0", extra={"demo/a.py": b"", "demo/sub/b.py": b"", "demo/c.txt": b""}
    )
    lock_entry = type(
        "Entry", (), {"name": "demo", "version": "1.0", "filename": wheel.name,
                      "sha256": sha256_of(wheel)},
    )()  # fmt: skip
    read = read_wheel(wheel, lock_entry, ("12.0",))  # type: ignore[arg-type]
    assert read.release.wheels[0].py_files == 3  # __init__.py, a.py, sub/b.py
    cat = catalogue.Catalogue(releases=(read.release,), targets=("12.0",))
    text = catalogue.dump(cat, ["made here"])
    assert "py_files = 3" in text
    assert catalogue.parse(tomllib.loads(text), "c.toml").releases[0].wheels[0].py_files == 3


@pytest.mark.parametrize("bad", ['"3"', "-1", "true"])
def test_py_files_not_a_count_is_one_error(bad: str) -> None:
    text = (
        '[catalogue]\nformat = 1\n[[release]]\ndistribution = "d"\nversions = ["1"]\n'
        f'[[release.wheel]]\nversion = "1"\nfilename = "d-1-py3-none-any.whl"\n'
        f'sha256 = "{"0" * 64}"\npy_files = {bad}\nmodules = []\n'
    )
    with pytest.raises(RecipeError) as err:
        catalogue.parse(tomllib.loads(text), "c.toml")
    assert "py_files" in str(err.value) and "c.toml" in str(err.value)


@pytest.mark.parametrize("py", ["cp311", "cp312"])
def test_the_sglang_lock_counts_every_file(py: str) -> None:
    """The committed 0.5.23 catalogue counts every file of its locks: their fetch takes the
    modules-per-byte order (torch and sglang among the first, the CUDA libraries last)."""
    lock = load_lock(REPO / f"locks/sglang-0.5.23/pylock.{py}-manylinux_2_34_x86_64.toml")
    counts = py_files_of(lock, list(lock.packages))
    assert None not in counts
    names = [p.name for p in lock.packages]
    order = [names[i] for i in fetch_order([p.size or 0 for p in lock.packages], None, counts)]
    assert order.index("sglang") < 10 and order.index("torch") < 60
    light = [
        p.name
        for p, n in zip(lock.packages, counts, strict=True)
        if n == 0 and (p.size or 0) > 100 * MB
    ]
    assert "nvidia-cudnn-cu13" in light
    assert order.index("torch") < min(order.index(n) for n in light)
