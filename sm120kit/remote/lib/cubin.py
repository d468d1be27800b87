"""The SM target of a bare cubin (a CUDA device ELF file, not a host library's fatbin): read
from its ELF header, the way ``cuobjdump -elf`` reports it.

A cubin is an ELF file with ``e_machine`` 190 (EM_CUDA) and OS ABI 0x41 (CUDA). Its SM number
is in ``e_flags``: bits 0-7 for ELF ABI version 7, bits 8-15 for ABI version 8 (LLVM's
``ELFObjectFileBase::getNVPTXCPUName``: ``EF_CUDA_SM`` for ``ELFABIVERSION_CUDA_V1``, else
``EF_CUDA_SM_MASK >> EF_CUDA_SM_OFFSET``; checked against cuobjdump 13.0 on nvcc 13.0.88
cubins of sm_80 to sm_121a, all ABI 8: ``flags=0x6007802`` is ``sm=120``).

The ``a`` suffix is the accelerator bit of ``e_flags`` when set (``EF_CUDA_ACCELERATORS_V8``
0x8 for ABI 8, ``EF_CUDA_ACCELERATORS`` 0x800 for ABI 7): flashinfer-cubin 0.6.12's ``fmhaSm103aKernel_*.cubin`` (toolkit 12.9) has
``flags=0xf00670c``, cuobjdump ``sm=103a``. nvcc 13.0 leaves that bit clear (its sm_120,
sm_120a and sm_120f cubins carry the same flags) and records the ``-arch`` it was given in the
``.note.nv.tkinfo`` note, where cuobjdump's ``sm=120a`` then comes from; the ``f`` suffix is
read from there only.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from sm120kit.remote.lib.elf import Elf, ElfError

EM_CUDA = 190
ELFOSABI_CUDA = 0x41
#: ELF ABI version 8 moved the SM number from bits 0-7 to bits 8-15 of e_flags.
ABI_V8 = 8
ACCELERATORS_V8 = 0x8
ACCELERATORS_V7 = 0x800
_TKINFO = ".note.nv.tkinfo"
_ARCH_ARG = re.compile(rb"-arch[ =]+sm_(\d+)([af]?)\b")


class CubinError(ValueError):
    """The bytes are not a cubin this reader knows."""


def cubin_sm(data: Any) -> int:
    """The SM number (``120``) of the cubin `data` (bytes); CubinError when it is none."""
    if len(data) < 0x40 or bytes(data[:4]) != b"\x7fELF":
        raise CubinError("not an ELF file")
    if data[5] not in (1, 2) or data[4] not in (1, 2):
        raise CubinError("unknown ELF class or byte order")
    e = "<" if data[5] == 1 else ">"
    (machine,) = struct.unpack_from(e + "H", data, 18)
    if machine != EM_CUDA:
        raise CubinError(f"not a CUDA ELF file (e_machine {machine})")
    (flags,) = struct.unpack_from(e + "I", data, 0x30 if data[4] == 2 else 0x24)
    sm = (flags >> 8) & 0xFF if data[8] >= ABI_V8 else flags & 0xFF
    if not sm:
        raise CubinError(f"no SM number in e_flags {flags:#x}")
    return sm


def _accelerated(data: Any) -> bool:
    """The ``a`` bit of e_flags (0x8 for ABI 8, 0x800 for ABI 7)."""
    e = "<" if data[5] == 1 else ">"
    (flags,) = struct.unpack_from(e + "I", data, 0x30 if data[4] == 2 else 0x24)
    return bool(flags & (ACCELERATORS_V8 if data[8] >= ABI_V8 else ACCELERATORS_V7))


def cubin_target(data: Any) -> str:
    """The SASS target (``sm_120a``) of the cubin `data`: the SM number of its e_flags, ``a``
    when its accelerator bit is set, else the ``a``/``f`` suffix of the ``-arch`` nvcc recorded
    for that same SM (none when the note names none). CubinError when `data` is not a cubin."""
    sm = cubin_sm(data)
    if _accelerated(data):
        return f"sm_{sm}a"
    suffix = ""
    try:
        where = Elf("cubin", data=bytes(data)).section_ranges(_TKINFO)
    except (ElfError, struct.error):
        where = []
    if where:
        start, stop = where[0]
        for m in _ARCH_ARG.finditer(bytes(data[start:stop])):
            if int(m.group(1)) == sm:
                suffix = m.group(2).decode()
                break
    return f"sm_{sm}{suffix}"
