"""The hosts' PEP 440 specifier check (sm120kit/remote/lib/version_spec.py) against
`packaging` (what the controller uses): one table of specifier sets and versions, every pair
answered the same; plus the cubin reader's arch decoding (sm120kit/remote/lib/cubin.py) on
ELF headers built here (no cubin file is read)."""

from __future__ import annotations

import struct

import pytest
from packaging.specifiers import SpecifierSet

from sm120kit.remote.lib import version_spec
from sm120kit.remote.lib.cubin import CubinError, cubin_sm, cubin_target

SPECS = [
    "",
    "==0.4.10",
    "==0.4.10+cu130",
    "!=0.4.10",
    ">=0.4.10,<0.5",
    ">0.4.10",
    "<0.5",
    "<=0.4.10",
    "==0.4.*",
    "!=0.4.*",
    "~=0.4.10",
    "~=0.4",
    ">=2.9.1,<2.10",
    "===0.4.10",
    ">1.0",
    "<1.0rc1",
]
VERSIONS = [
    "0.4.10",
    "0.4.10+cu130",
    "0.4.10.0",
    "0.4.9",
    "0.4.11",
    "0.4.10.post1",
    "0.4.11rc1",
    "0.5.0",
    "0.5.0rc1",
    "0.5.0.dev3",
    "0.3.21",
    "1.0",
    "1.0.post1",
    "1.0+local",
    "1.0rc1",
    "1.0a2",
    "2.9.1+cu130",
    "2.10.0",
    "1!0.4.10",
]


@pytest.mark.parametrize("spec", SPECS)
def test_the_hosts_containment_is_packagings(spec: str) -> None:
    want = {v: SpecifierSet(spec).contains(v, prereleases=True) for v in VERSIONS}
    got = {v: version_spec.contains(spec, v) for v in VERSIONS}
    assert got == want


@pytest.mark.parametrize(
    ("sets", "version", "held"),
    [
        (["==0.4.10"], "0.4.10+cu130", True),  # a local label is the same release
        (["==0.4.10", ">=0.5,<0.6"], "0.5.3", True),  # one of the ranges
        ([">=0.4.10,<0.5"], "0.5.0", False),
        ([], "0.4.10", False),  # no range: holds for nothing
        (["==0.4.10"], None, False),  # no version installed
        (["==0.4.10"], "not a version", False),
        (["=>0.4"], "0.4.10", False),  # an unreadable specifier holds for nothing
    ],
)
def test_a_fact_holds_for_any_of_its_ranges(sets: list[str], version: object, held: bool) -> None:
    assert version_spec.any_contains(sets, version) is held


def _elf(flags: int, abi: int, machine: int = 190) -> bytes:
    """A 64-bit little-endian ELF header of a cubin (no sections)."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41, abi]) + bytes(7)
    head = ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, 0, 0, flags, 64, 0, 0, 64, 0, 0)
    return head + bytes(64)


@pytest.mark.parametrize(
    ("flags", "abi", "target"),
    [
        (0x6007802, 8, "sm_120"),  # nvcc 13.0 -arch=sm_120 (cuobjdump: sm=120)
        (0x6006402, 8, "sm_100"),  # nvcc 13.0 -arch=sm_100a: suffix only in the tkinfo note
        (0x6007902, 8, "sm_121"),
        (0x6005A04, 8, "sm_90"),
        (0xF00670C, 8, "sm_103a"),  # flashinfer-cubin 0.6.12 fmhaSm103aKernel (cuobjdump: 103a)
        (0x5A0D5A, 7, "sm_90a"),  # ABI 7: EF_CUDA_ACCELERATORS 0x800
        (0x5A055A, 7, "sm_90"),  # ABI 7: the SM number in the low byte
        (0x500550, 7, "sm_80"),
    ],
)
def test_a_cubins_sm_is_read_from_e_flags(flags: int, abi: int, target: str) -> None:
    data = _elf(flags, abi)
    assert cubin_target(data) == target
    assert cubin_sm(data) == int(target[3:].rstrip("af"))


@pytest.mark.parametrize(
    "data",
    [b"not an elf" * 10, _elf(0x6007802, 8, machine=62), _elf(0x0, 8)],
)
def test_what_is_no_cubin_says_so(data: bytes) -> None:
    with pytest.raises(CubinError):
        cubin_target(data)
