"""The libcuda.so.1 stub preflight writes on a host without a driver (remote/lib/driver_stub.py):
real bytes loaded by this machine's real dynamic loader (ctypes), nothing simulated."""

from __future__ import annotations

import ctypes
import os
import platform

import pytest

from sm120kit.remote.lib import driver_stub


@pytest.mark.parametrize(
    ("name", "value"),
    [(b"", 0), (b"printf", 0x077905A6), (b"exit", 0x0006CF04), (b"cuInit", 0x06AA0504)],
)
def test_elf_hash(name: bytes, value: int) -> None:
    assert driver_stub.elf_hash(name) == value


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="no stub for this CPU")
def test_stub_loads_and_every_entry_point_returns_stub_error(tmp_path) -> None:
    names = {"cuInit", "cuPointerGetAttribute", "cuGetProcAddress_v2", "cuDriverGetVersion"}
    path = driver_stub.write_stub(str(tmp_path), names)
    assert os.path.basename(path) == "libcuda.so.1"
    lib = ctypes.CDLL(path)
    for name in sorted(names):
        assert getattr(lib, name)() == driver_stub.STUB_ERROR
    with pytest.raises(AttributeError):
        lib.cuNotDefined  # noqa: B018 - only the names asked for are defined


def test_needed_symbols_reads_modules_that_need_libcuda(tmp_path) -> None:
    # A module needing libcuda.so.1 is what the stub serves; the stub itself needs nothing.
    stub = driver_stub.write_stub(str(tmp_path), {"cuInit"})
    assert driver_stub.needed_symbols([stub, str(tmp_path / "missing.so")]) == set()
    assert driver_stub.shared_objects(str(tmp_path)) == [stub]
