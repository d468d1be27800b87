"""Just enough of an ELF file: sections, dynamic entries, dynamic symbols with their versions.

Read with mmap and struct only (no binutils on the host).

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Any

SHT_DYNAMIC = 6
SHT_DYNSYM = 11
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
DT_NEEDED = 1
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29
STB_GLOBAL = 1
STB_WEAK = 2
STB_GNU_UNIQUE = 10
VER_FLG_BASE = 1


class ElfError(Exception):
    """The file is not an ELF shared object this probe can read."""


class Elf:
    """Just enough of an ELF file: sections, dynamic entries, dynamic symbols with versions."""

    def __init__(self, path: str, data: bytes | None = None) -> None:
        """Read the ELF file at `path` (memory-mapped), or the bytes `data` (`path` names them)."""
        self.path = path
        if data is not None:
            if len(data) < 64:
                raise ElfError("too small for ELF")
            self._data: Any = data
        else:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < 64:
                    raise ElfError("too small for ELF")
                self._data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        d = self._data
        if d[:4] != b"\x7fELF":
            raise ElfError("not an ELF file")
        self.elfclass = d[4]
        if self.elfclass not in (1, 2) or d[5] not in (1, 2):
            raise ElfError("unknown ELF class or byte order")
        self.e = "<" if d[5] == 1 else ">"
        self.is64 = self.elfclass == 2
        (self.machine,) = struct.unpack_from(self.e + "H", d, 18)
        if self.is64:
            (shoff,) = struct.unpack_from(self.e + "Q", d, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from(self.e + "HHH", d, 0x3A)
            shfmt = "IIQQQQIIQQ"
        else:
            (shoff,) = struct.unpack_from(self.e + "I", d, 0x20)
            shentsize, shnum, shstrndx = struct.unpack_from(self.e + "HHH", d, 0x2E)
            shfmt = "IIIIIIIIII"
        self.sections: list[tuple[str, int, int, int, int, int]] = []
        raw = []
        for i in range(shnum):
            off = shoff + i * shentsize
            if off + shentsize > len(d):
                raise ElfError("truncated section headers")
            raw.append(struct.unpack_from(self.e + shfmt, d, off))
        names = raw[shstrndx] if shstrndx < len(raw) else None
        for sh in raw:
            name = ""
            if names is not None:
                start = names[4] + sh[0]
                end = d.find(b"\0", start)
                name = d[start:end].decode("latin-1")
            # (name, type, offset, size, link, info)
            self.sections.append((name, sh[1], sh[4], sh[5], sh[6], sh[7]))
        self._dyn: dict[str, Any] | None = None
        self._vers: tuple[dict[int, str], dict[int, tuple[str, str]], set[str]] | None = None
        self._syms: tuple[list[tuple[str, str | None, bool]], dict[str, set[str]]] | None = None

    def close(self) -> None:
        """Release the mapping."""
        try:
            self._data.close()
        except (AttributeError, ValueError):
            pass

    @property
    def data(self) -> Any:
        """The whole file, memory-mapped."""
        return self._data

    def section_ranges(self, name: str) -> list[tuple[int, int]]:
        """(start, stop) file offsets of every section called ``name``."""
        out = []
        for sname, stype, off, size, _link, _info in self.sections:
            if sname == name and stype != 8:  # 8 = SHT_NOBITS
                out.append((off, off + size))
        return out

    def _strtab(self, index: int) -> Any:
        if index >= len(self.sections):
            return b""
        _n, _t, off, size, _l, _i = self.sections[index]
        return self._data[off : off + size]

    @staticmethod
    def _cstr(tab: Any, off: int) -> str:
        end = tab.find(b"\0", off)
        return bytes(tab[off : end if end >= 0 else len(tab)]).decode("utf-8", "replace")

    def dynamic(self) -> dict[str, Any]:
        """NEEDED, SONAME, RPATH and RUNPATH from the dynamic section."""
        if self._dyn is not None:
            return self._dyn
        info: dict[str, Any] = {"needed": [], "soname": None, "rpath": [], "runpath": []}
        for _name, stype, off, size, link, _i in self.sections:
            if stype != SHT_DYNAMIC:
                continue
            strtab = self._strtab(link)
            fmt = self.e + ("qQ" if self.is64 else "iI")
            step = struct.calcsize(fmt)
            for pos in range(off, off + size - step + 1, step):
                tag, val = struct.unpack_from(fmt, self._data, pos)
                if tag == 0:
                    break
                if tag == DT_NEEDED:
                    info["needed"].append(self._cstr(strtab, val))
                elif tag == DT_SONAME:
                    info["soname"] = self._cstr(strtab, val)
                elif tag == DT_RPATH:
                    info["rpath"] = [p for p in self._cstr(strtab, val).split(":") if p]
                elif tag == DT_RUNPATH:
                    info["runpath"] = [p for p in self._cstr(strtab, val).split(":") if p]
        self._dyn = info
        return info

    def versions(self) -> tuple[dict[int, str], dict[int, tuple[str, str]], set[str]]:
        """(verdef index -> name, verneed index -> (file, name), defined version names)."""
        if self._vers is not None:
            return self._vers
        defs: dict[int, str] = {}
        base: set[int] = set()
        needs: dict[int, tuple[str, str]] = {}
        for _name, stype, off, _size, link, _info in self.sections:
            if stype == SHT_GNU_VERDEF:
                strtab = self._strtab(link)
                pos = off
                while True:
                    _v, flags, ndx, _cnt, _h, aux, nxt = struct.unpack_from(
                        self.e + "HHHHIII", self._data, pos
                    )
                    (vname,) = struct.unpack_from(self.e + "I", self._data, pos + aux)
                    defs[ndx] = self._cstr(strtab, vname)
                    if flags & VER_FLG_BASE:
                        base.add(ndx)
                    if not nxt:
                        break
                    pos += nxt
            elif stype == SHT_GNU_VERNEED:
                strtab = self._strtab(link)
                pos = off
                while True:
                    _v, cnt, vfile, aux, nxt = struct.unpack_from(self.e + "HHIII", self._data, pos)
                    fname = self._cstr(strtab, vfile)
                    apos = pos + aux
                    for _ in range(cnt):
                        _h, _f, other, vname, anext = struct.unpack_from(
                            self.e + "IHHII", self._data, apos
                        )
                        needs[other] = (fname, self._cstr(strtab, vname))
                        if not anext:
                            break
                        apos += anext
                    if not nxt:
                        break
                    pos += nxt
        defined = {v for k, v in defs.items() if k not in base}
        for k in base:
            defs.pop(k, None)
        self._vers = (defs, needs, defined)
        return self._vers

    def symbols(self) -> tuple[list[tuple[str, str | None, bool]], dict[str, set[str]]]:
        """Undefined dynamic symbols as (name, version, weak), and defined name -> versions.

        A defined symbol's version set holds "" when an unversioned reference may bind to it,
        and "*" when the file has no version info at all (then versioned references bind too).
        """
        if self._syms is not None:
            return self._syms
        defs, needs, _defined = self.versions()
        undefined: list[tuple[str, str | None, bool]] = []
        defined: dict[str, set[str]] = {}
        for idx, (_name, stype, off, size, link, _info) in enumerate(self.sections):
            if stype != SHT_DYNSYM:
                continue
            strtab = self._strtab(link)
            versym = None
            for _n2, t2, off2, size2, link2, _i2 in self.sections:
                if t2 == SHT_GNU_VERSYM and link2 == idx:
                    versym = struct.unpack_from(self.e + f"{size2 // 2}H", self._data, off2)
            fmt = self.e + ("IBBHQQ" if self.is64 else "IIIBBH")
            table = self._data[off : off + size]
            for i, ent in enumerate(struct.iter_unpack(fmt, table)):
                if self.is64:
                    st_name, st_info, _other, shndx = ent[0], ent[1], ent[2], ent[3]
                else:
                    st_name, st_info, _other, shndx = ent[0], ent[3], ent[4], ent[5]
                if not st_name:
                    continue
                bind = st_info >> 4
                if bind not in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
                    continue
                name = self._cstr(strtab, st_name)
                vs = versym[i] if versym is not None and i < len(versym) else 1
                vidx = vs & 0x7FFF
                if shndx == 0:
                    ver = needs[vidx][1] if vidx in needs else None
                    undefined.append((name, ver, bind == STB_WEAK))
                else:
                    versions = defined.setdefault(name, set())
                    if vidx in defs:
                        versions.add(defs[vidx])
                        if not vs & 0x8000:
                            versions.add("")  # default version: unversioned refs bind to it
                    else:
                        versions.add("")
                        if versym is None:
                            versions.add("*")  # no version info: any versioned ref binds
        self._syms = (undefined, defined)
        return self._syms


_ELF_CACHE: dict[str, Elf | None] = {}


def open_elf(path: str) -> Elf | None:
    """Cached :class:`Elf` for ``path`` (by real path), or None when it is not readable ELF."""
    real = os.path.realpath(path)
    if real not in _ELF_CACHE:
        try:
            _ELF_CACHE[real] = Elf(real)
        except (OSError, ElfError, struct.error, ValueError):
            _ELF_CACHE[real] = None
    return _ELF_CACHE[real]
