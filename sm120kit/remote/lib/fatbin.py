"""CUDA fatbins inside an ELF file: the entry headers of ``.nv_fatbin`` containers, and the
SASS and PTX targets they carry (the layout is checked against cuobjdump in the tests).

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import struct
from typing import Any

from sm120kit.remote.lib.cudaarch import target_key
from sm120kit.remote.lib.elf import Elf, open_elf

FATBIN_MAGIC = 0xBA55ED50
FATBIN_CONTAINER_HEADER = 16  # u32 magic, u16 version, u16 header size, u64 payload size
ENTRY_KIND_PTX = 1
ENTRY_KIND_ELF = 2
ENTRY_SM_OFFSET = 28  # u32 SM number (e.g. 120)
ENTRY_FLAGS_OFFSET = 40  # u64 flags
FLAG_COMPRESSED_LZ4 = 0x2000  # nvcc --compress-mode=speed
FLAG_COMPRESSED_ZSTD = 0x8000  # nvcc 13 default / size / balance
FLAG_ARCH_SPECIFIC = 0x100000  # `a` targets: sm_120a / compute_120a
FLAG_FAMILY = 0x200000  # `f` targets: sm_120f / compute_120f
#: The fatbin the CUDA runtime loads: the device-linked images (``cuobjdump --list-elf``
#: without ``-all`` lists exactly these).
FATBIN_SECTIONS = (".nv_fatbin",)
#: Relocatable device code (``-rdc``): the inputs of the device link, kept in the library but
#: never loaded to run. sgl-deep-ep 0.1.2.post1's ``deep_ep/_C`` holds sm_120 SASS and
#: compute_120 PTX here only, while its ``.nv_fatbin`` holds sm_90, sm_100 and sm_103: on 12.0
#: no kernel image (``cuobjdump -all --list-elf`` shows both sets).
RELOCATABLE_SECTION = "__nv_relfatbin"


def fatbin_entries(raw: Any, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
    """Entry headers of every fatbin container in ``raw[start:stop]`` (a ``.nv_fatbin`` section).

    ``raw`` is bytes or an mmap: only headers are read, payloads (maybe compressed) are skipped.
    """
    magic = struct.pack("<I", FATBIN_MAGIC)
    limit = len(raw) if stop is None else min(stop, len(raw))
    out: list[dict[str, Any]] = []
    pos = start
    while True:
        pos = raw.find(magic, pos, limit)
        if pos < 0 or pos + FATBIN_CONTAINER_HEADER > limit:
            return out
        _m, _ver, hsize, psize = struct.unpack_from("<IHHQ", raw, pos)
        entry = pos + hsize
        end = min(pos + hsize + psize, limit)
        if hsize < FATBIN_CONTAINER_HEADER:
            pos += 4
            continue
        while entry + 48 <= end:
            kind, _ev, ehsize, epsize = struct.unpack_from("<HHIQ", raw, entry)
            if kind not in (ENTRY_KIND_PTX, ENTRY_KIND_ELF) or ehsize < 48:
                break
            (sm,) = struct.unpack_from("<I", raw, entry + ENTRY_SM_OFFSET)
            (flags,) = struct.unpack_from("<Q", raw, entry + ENTRY_FLAGS_OFFSET)
            variant = "a" if flags & FLAG_ARCH_SPECIFIC else ("f" if flags & FLAG_FAMILY else "")
            prefix = "sm_" if kind == ENTRY_KIND_ELF else "compute_"
            out.append(
                {
                    "kind": "sass" if kind == ENTRY_KIND_ELF else "ptx",
                    "sm": sm,
                    "variant": variant,
                    "target": f"{prefix}{sm}{variant}",
                    "compressed": bool(flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD)),
                    "flags": flags,
                }
            )
            entry += ehsize + epsize
        pos = max(end, pos + 4)


def device_targets(path: str) -> tuple[list[str], list[str], bool]:
    """(SASS targets, PTX targets, has a fatbin section) of one ELF file."""
    elf = open_elf(path)
    if elf is None:
        return [], [], False
    return elf_targets(elf)


def relocatable_targets(path: str) -> list[str]:
    """SASS and PTX targets of an ELF file's relocatable device code (not loaded to run)."""
    elf = open_elf(path)
    if elf is None:
        return []
    found = {e["target"] for s, t in elf.section_ranges(RELOCATABLE_SECTION)
             for e in fatbin_entries(elf.data, s, t)}  # fmt: skip
    # SASS before PTX, each by arch: one order on every run (a set has none).
    return sorted(found, key=lambda t: (t.startswith("compute_"), target_key(t)))


def elf_targets(elf: Elf) -> tuple[list[str], list[str], bool]:
    """(SASS targets, PTX targets, has a fatbin section) of a read ELF file: the code the
    runtime loads (`FATBIN_SECTIONS`), not the relocatable device code."""
    sass: set[str] = set()
    ptx: set[str] = set()
    found = False
    for name in FATBIN_SECTIONS:
        for start, stop in elf.section_ranges(name):
            found = True
            for ent in fatbin_entries(elf.data, start, stop):
                (sass if ent["kind"] == "sass" else ptx).add(ent["target"])
    return sorted(sass, key=target_key), sorted(ptx, key=target_key), found
