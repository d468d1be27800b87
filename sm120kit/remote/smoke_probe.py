"""Smoke probe: can the installed CUDA extensions of a Python env load and run on this GPU?

Runs on the remote host with only a Python interpreter (no binutils, no CUDA toolkit, no GPU
needed). Stdlib-only, Python 3.8+, one self-contained file: the controller sends it on stdin
and runs ``python - '<json args>'``. Prints exactly one JSON document on stdout.

Arguments (one JSON document, argv[1])::

    {"python": "/path/to/python" | null,   # env to check: a python, a venv dir or a command
                                            # name on PATH; null: the interpreter running this
     "packages": ["sgl-kernel", ...],       # distribution names
     "arch": "12.0" | null,                 # compute capability to judge for
     "gpu": false,                          # run one tiny real op per package when CUDA works
     "gpu_ops": {"pkg": "python code"},     # optional: override/add the op per package
     "jobs": 4, "timeout": 300,             # optional: parallel subprocesses (default: one
                                            # per CPU, memory permitting), seconds each
     "declared": {"pkg": {                  # optional, from the recipe (docs/smoke.md):
        "recipe": "r580", "source": "recipe r580", "version": "0.3.21",
        "arch": ["12.0"],                   # the recipe's target archs
        "torch": "==2.9.1",                 # its torch pin for this package version
        "not_for_arch": {"flash_ops": "why"}}}}  # modules with no code for those archs

Checks per distribution: import order (after ``import torch`` and alone), undefined symbols
(dlopen RTLD_NOW after torch, plus a static ELF read with the loader's search rules; every
missing library, version and symbol sorted into causes), arch coverage (the ``.nv_fatbin``
headers; modules declared not for the arch are ``info``), the arch-dispatching loader
(sgl-kernel style ``sm*/`` variant directories, evaluated with a faked capability), and a
GPU op. The wheel's build record (``sm120kit-build.json`` in its dist-info) says which torch
it was built for; else a Requires-Dist pin; else the recipe's pin.

Output::

    {"probe_version": 1, "python": path, "python_version": "3.11.7",
     "arch": "12.0" | null, "arch_source": "args" | "gpu" | "none", "gpu": bool,
     "torch": {"version", "cxx11_abi", "cuda", "cuda_available", "capability", "error"},
     "error": "..." (only when the env could not be inspected),
     "missing_python": true (only when no interpreter is at "python"; "error" says why),
     "packages": {name: {"installed", "version", "requires_torch": "==2.9.1" | "" | null,
        "location", "provenance": {...} | null, "built_for": {"torch", "cuda", "source"} | null,
        "torch": {"built_for", "built_for_source", "installed", "installed_cuda", "cpu_build",
        "summary"}, "declared": {"source", "not_for_arch": {rel: why}} | null,
        "checks": [{"check": "import_order" | "undefined_symbols" |
        "arch_coverage" | "loader" | "gpu_op", "status": "pass" | "warn" | "fail" | "skip",
        "reason": one line, "details": {...}}],
        "extensions": [{"path", "rel", "module", "needed", "rpath", "runpath", "missing_libs",
          "needs_torch_loaded", "missing_symbols": [{"name", "demangled", "expected_from",
          "version"}], "missing_symbols_total", "missing_versions": [{"version", "library",
          "path"}], "sass": ["sm_120", "sm_120a"], "ptx": ["compute_120"], "has_fatbin",
          "dlopen_error", "import_error", "import_alone_error", "diagnosis": [...],
          "causes": [{"cause", "reason", "libraries", "symbols", "symbols_total"}]}]}}}

Missing symbols carry ``cause`` and, for torch ones, ``variant`` (the installed torch's
closest definition). Per-file entries in a check's details may have status ``info``.
"""

from __future__ import annotations

import ctypes
import glob
import json
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

PROBE_VERSION = 1
MARK = "@@SM120KIT-SMOKE@@"

# --- fatbin layout (checked against cuobjdump in the tests; flag bits measured on nvcc 13.0) ---
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
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")

# --- ELF constants ---------------------------------------------------------------------------
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

SHLIB_RE = re.compile(r"\.so(\.\d+)*$")
CUDART_SYMBOLS = {
    "__cudaRegisterFatBinary",
    "__cudaRegisterFatBinaryEnd",
    "__cudaUnregisterFatBinary",
    "__cudaRegisterFunction",
    "__cudaRegisterVar",
    "__cudaPushCallConfiguration",
    "__cudaPopCallConfiguration",
    "cudaLaunchKernel",
}
TORCH_MANGLED_RE = re.compile(r"^_ZN[KVr]*(3c10|2at|5torch|6caffe2)")
MAX_LISTED_SYMBOLS = 40
#: Read from scanned distributions at most this many missing symbols each (sorting needs all).
MAX_SCANNED_SYMBOLS = 5000
#: The build record sm120kit writes into the dist-info of every wheel it builds.
PROVENANCE_FILE = "sm120kit-build.json"


# =============================================================================================
# ELF reading
# =============================================================================================


class ElfError(Exception):
    """The file is not an ELF shared object this probe can read."""


class Elf:
    """Just enough of an ELF file: sections, dynamic entries, dynamic symbols with versions."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 64:
                raise ElfError("too small for ELF")
            self._data: Any = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
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


# =============================================================================================
# Fatbin headers
# =============================================================================================


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


def _target_key(target: str) -> tuple[int, str]:
    m = re.match(r"^(?:sm|compute)_(\d+)([af]?)$", target)
    return (int(m.group(1)), m.group(2)) if m else (0, target)


def device_targets(path: str) -> tuple[list[str], list[str], bool]:
    """(SASS targets, PTX targets, has a fatbin section) of one ELF file."""
    elf = open_elf(path)
    if elf is None:
        return [], [], False
    sass: set[str] = set()
    ptx: set[str] = set()
    found = False
    for name in FATBIN_SECTIONS:
        for start, stop in elf.section_ranges(name):
            found = True
            for ent in fatbin_entries(elf.data, start, stop):
                (sass if ent["kind"] == "sass" else ptx).add(ent["target"])
    return sorted(sass, key=_target_key), sorted(ptx, key=_target_key), found


# =============================================================================================
# Arch verdicts
# =============================================================================================


def parse_cc(value: Any) -> tuple[int, int] | None:
    """A compute capability from "12.0", "120", "sm_120", 12.0 or [12, 0]; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    text = str(value).strip().lower()
    m = re.match(r"^(\d+)\.(\d)$", text)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.match(r"^(?:sm_|compute_)?(\d+)[af]?$", text)
    if m:
        num = int(m.group(1))
        return num // 10, num % 10
    raise ValueError(f"not a compute capability: {value!r}")


def cc_text(cc: tuple[int, int]) -> str:
    """12.0 style."""
    return f"{cc[0]}.{cc[1]}"


def split_target(target: str) -> tuple[int, int, str]:
    """'sm_120a' -> (12, 0, 'a'); 'compute_86' -> (8, 6, '')."""
    sm, variant = _target_key(target)
    return sm // 10, sm % 10, variant


def sass_runs_on(target: str, cc: tuple[int, int]) -> bool:
    """SASS for sm_XY runs on the same major with minor >= Y; `a` SASS only on exactly X.Y.

    `f` (family) SASS runs on the family members: same major, minor >= Y (sm_120f: 12.0, 12.1).
    """
    major, minor, variant = split_target(target)
    if variant == "a":
        return (major, minor) == cc
    return major == cc[0] and cc[1] >= minor


def ptx_jits_on(target: str, cc: tuple[int, int]) -> bool:
    """PTX compute_XY JITs on any cc >= X.Y; `a` PTX only on X.Y, `f` PTX within the family."""
    major, minor, variant = split_target(target)
    if variant == "a":
        return (major, minor) == cc
    if variant == "f":
        return major == cc[0] and cc[1] >= minor
    return cc >= (major, minor)


def arch_verdict(sass: list[str], ptx: list[str], cc: tuple[int, int]) -> tuple[str, str]:
    """(status, one-line reason) for device code ``sass``/``ptx`` on a GPU of capability ``cc``."""
    where = cc_text(cc)
    if not sass and not ptx:
        return "skip", "no device code"
    runs = [t for t in sass if sass_runs_on(t, cc)]
    if runs:
        return "pass", "SASS {} runs on {}".format(", ".join(runs), where)
    jit = [t for t in ptx if ptx_jits_on(t, cc)]
    have = ", ".join(sass + ptx)
    if jit:
        return (
            "warn",
            "only PTX {} for {} (has {}): JIT on first run costs time and needs a new enough driver".format(
                ", ".join(jit),
                where,
                have,
            ),
        )
    return (
        "fail",
        f"no SASS or PTX usable on {where} (has {have}): 'no kernel image is available for execution on the device' predicted",
    )


# =============================================================================================
# Library search, the way ld.so does it
# =============================================================================================


def _read_ld_conf(path: str, seen: set[str]) -> list[str]:
    if path in seen:
        return []
    seen.add(path)
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    dirs: list[str] = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include"):
            for pattern in line.split()[1:]:
                if not os.path.isabs(pattern):
                    pattern = os.path.join(os.path.dirname(path), pattern)
                for inc in sorted(glob.glob(pattern)):
                    dirs += _read_ld_conf(inc, seen)
        elif line.startswith("hwcap"):
            continue
        else:
            for part in re.split(r"[:\s,]+", line):
                if part:
                    dirs.append(part.split("=", 1)[0])
    return dirs


def system_lib_dirs() -> list[str]:
    """ld.so.conf directories (with includes), then the default and multiarch directories."""
    dirs = _read_ld_conf("/etc/ld.so.conf", set())
    machine = os.uname().machine
    triplets = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
    triplet = triplets.get(machine, machine + "-linux-gnu")
    defaults = [
        "/lib/" + triplet,
        "/usr/lib/" + triplet,
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ]
    out: list[str] = []
    for d in dirs + defaults:
        if d not in out:
            out.append(d)
    return out


def _expand(path: str, origin: str) -> str:
    return path.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


class Resolver:
    """Finds NEEDED libraries like ld.so: RPATH chain, LD_LIBRARY_PATH, RUNPATH, system dirs.

    ``preloaded`` maps sonames already in the process (what ``import torch`` loaded) to paths:
    the loader reuses those before searching.
    """

    def __init__(self, ld_library_path: str, sys_dirs: list[str]) -> None:
        self.env_dirs = [d for d in ld_library_path.split(":") if d]
        self.sys_dirs = sys_dirs

    def _fits(self, path: str, ref: Elf) -> bool:
        elf = open_elf(path)
        return elf is not None and elf.elfclass == ref.elfclass and elf.machine == ref.machine

    def find(
        self, name: str, requester: Elf, rpath_chain: list[str], preloaded: dict[str, str] | None
    ) -> tuple[str | None, str]:
        """(path or None, how it was found) for NEEDED ``name`` of ``requester``."""
        if "/" in name:
            path = _expand(name, os.path.dirname(requester.path))
            return (path, "path") if os.path.isfile(path) else (None, "path")
        if preloaded is not None and name in preloaded:
            return preloaded[name], "loaded-by-torch"
        dyn = requester.dynamic()
        candidates: list[tuple[str, str]] = []
        if not dyn["runpath"]:
            candidates += [(d, "rpath") for d in rpath_chain]
        candidates += [(d, "LD_LIBRARY_PATH") for d in self.env_dirs]
        origin = os.path.dirname(requester.path)
        candidates += [(_expand(d, origin), "runpath") for d in dyn["runpath"]]
        candidates += [(d, "system") for d in self.sys_dirs]
        for directory, how in candidates:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and self._fits(path, requester):
                return path, how
        return None, "not found"

    def closure(
        self, root: str, preloaded: dict[str, str] | None
    ) -> tuple[dict[str, str], list[tuple[str, str]]]:
        """All objects reachable by NEEDED from ``root``: ({soname: path}, [(missing, wanted by)])."""
        found: dict[str, str] = {}
        missing: list[tuple[str, str]] = []
        elf = open_elf(root)
        if elf is None:
            return found, missing
        origin = os.path.dirname(root)
        queue = [(elf, [_expand(d, origin) for d in elf.dynamic()["rpath"]])]
        seen = {os.path.realpath(root)}
        while queue:
            obj, chain = queue.pop(0)
            for name in obj.dynamic()["needed"]:
                if name in found or any(m == name for m, _ in missing):
                    continue
                path, _how = self.find(name, obj, chain, preloaded)
                if path is None:
                    missing.append((name, os.path.basename(obj.path)))
                    continue
                found[name] = path
                real = os.path.realpath(path)
                child = open_elf(path)
                if real in seen or child is None:
                    continue
                seen.add(real)
                corigin = os.path.dirname(path)
                cchain = [_expand(d, corigin) for d in child.dynamic()["rpath"]] + chain
                queue.append((child, cchain))
        return found, missing


# =============================================================================================
# Demangling and diagnosis
# =============================================================================================


class Demangler:
    """``__cxa_demangle`` from libstdc++ through ctypes; returns the raw name when unavailable."""

    def __init__(self) -> None:
        self._fn: Any = None
        self._free: Any = None
        try:
            lib = ctypes.CDLL("libstdc++.so.6")
            fn = getattr(lib, "__cxa_demangle")  # getattr: a class body would mangle __names
            fn.restype = ctypes.c_void_p
            fn.argtypes = [
                ctypes.c_char_p,
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_int),
            ]
            libc = ctypes.CDLL(None)
            libc.free.argtypes = [ctypes.c_void_p]
            self._fn, self._free = fn, libc.free
        except (OSError, AttributeError):
            pass

    def __call__(self, name: str) -> str:
        if self._fn is None or not name.startswith("_Z"):
            return name
        status = ctypes.c_int(0)
        ptr = self._fn(name.encode(), None, None, ctypes.byref(status))
        if status.value != 0 or not ptr:
            return name
        try:
            return ctypes.string_at(ptr).decode("utf-8", "replace")
        finally:
            self._free(ptr)


def is_cudart_symbol(name: str) -> bool:
    """Symbols that only the CUDA runtime (cudart) defines."""
    return (
        name in CUDART_SYMBOLS
        or name.startswith("__cuda")
        or re.match(r"^cuda[A-Z]", name) is not None
    )


def is_torch_symbol(name: str, demangled: str) -> bool:
    """A c10 / at / torch / caffe2 C++ symbol."""
    if TORCH_MANGLED_RE.match(name):
        return True
    return re.search(r"(^|[\s(<,])(c10|at|torch|caffe2)::", demangled) is not None


def uses_old_string(name: str, demangled: str) -> bool:
    """The symbol mangles std::string with the pre-C++11 ABI (`Ss`)."""
    if "__cxx11" in name:
        return False
    if demangled != name:
        return "std::string" in demangled or "std::basic_string<char" in demangled
    return re.search(r"(RK|[0-9A-Z_])Ss", name) is not None


def expected_from(
    name: str, demangled: str, version: str | None, needed: list[str], verfile: str | None
) -> str | None:
    """The library a missing symbol was meant to come from: a NEEDED entry when one fits."""
    if verfile:
        return verfile

    def pick(prefixes: tuple[str, ...], fallback: str) -> str:
        for prefix in prefixes:
            for lib in needed:
                if lib.startswith(prefix):
                    return lib
        return fallback

    if is_cudart_symbol(name):
        return pick(("libcudart",), "libcudart.so")
    if re.match(r"^_ZN[KVr]*3c104cuda", name) or "c10::cuda::" in demangled:
        return pick(("libc10_cuda",), "libc10_cuda.so")
    if TORCH_MANGLED_RE.match(name) and "3c10" in name[:10]:
        return pick(("libc10",), "libc10.so")
    if is_torch_symbol(name, demangled):
        if "cuda" in demangled.lower():
            return pick(("libtorch_cuda", "libtorch"), "libtorch_cuda.so")
        if "torch::python" in demangled or "pybind11" in demangled or "THP" in name:
            return pick(("libtorch_python",), "libtorch_python.so")
        return pick(("libtorch_cpu", "libtorch"), "libtorch_cpu.so")
    if name.startswith(("Py", "_Py")):
        return pick(("libpython",), "libpython")
    if (
        name.startswith(("_ZNSt", "_ZSt", "_ZNKSt", "__cxa", "__gxx"))
        or version
        and version.startswith(("GLIBCXX", "CXXABI"))
    ):
        return pick(("libstdc++",), "libstdc++.so.6")
    return None


def short_error(text: str, limit: int = 300) -> str:
    """One line: the last non-empty line, long paths cut to their file name."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    line = lines[-1] if lines else str(text).strip()
    line = re.sub(r"(/[^\s:'`]+)+/([^/\s:'`]+)", r"\2", line)
    return line if len(line) <= limit else line[: limit - 3] + "..."


#: CUDA libraries whose soname major is the CUDA major they belong to (libcudart.so.12 is
#: CUDA 12's runtime). cuDNN and NCCL number their sonames by their own versions.
CUDA_MAJOR_LIBS = (
    "libcudart",
    "libnvrtc",
    "libnvrtc-builtins",
    "libcublas",
    "libcublasLt",
    "libcufft",
    "libcufftw",
    "libcurand",
    "libcusparse",
    "libcusolver",
    "libnvJitLink",
    "libcupti",
    "libnvblas",
)
DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so")
TORCH_CUDA_LIBS = ("libc10_cuda", "libtorch_cuda")
MAX_CITED = 3
#: How causes are listed: the ones that explain the most first.
CAUSE_ORDER = (
    "glibc_too_old",
    "libstdcxx_too_old",
    "symbol_version",
    "cxx11_abi",
    "torch_abi",
    "torch_cpu_build",
    "cuda_major",
    "no_driver",
    "cudart_not_linked",
    "cudart_too_old",
    "torch_lib_missing",
    "library_missing",
    "symbol_missing",
    "load_error",
)


def cuda_lib_major(lib: str) -> tuple[str, int] | None:
    """('libcudart', 12) for 'libcudart.so.12'; None for anything else."""
    m = re.match(r"^(lib[\w+-]+)\.so\.(\d+)", lib)
    if m and m.group(1) in CUDA_MAJOR_LIBS:
        return m.group(1), int(m.group(2))
    return None


def torch_is_cpu_build(torch_info: dict[str, Any]) -> bool:
    """The installed torch has no CUDA parts (torch.version.cuda is None, or a +cpu build)."""
    version = str(torch_info.get("version") or "")
    if not version or torch_info.get("error") and not torch_info.get("dir"):
        return False
    return torch_info.get("cuda") in (None, "") or version.endswith("+cpu")


def torch_text(torch_info: dict[str, Any]) -> str:
    """'torch 2.13.0+cpu' (or 'no importable torch')."""
    version = torch_info.get("version")
    return f"torch {version}" if version else "no importable torch"


def built_for_text(built_for: dict[str, Any] | None) -> str | None:
    """'torch 2.9.1 (recipe pin for sgl-kernel 0.3.21)', or None when nothing says."""
    if not built_for or not built_for.get("torch"):
        return None
    spec = str(built_for["torch"])
    what = spec[2:] if spec.startswith("==") else spec
    cuda = built_for.get("cuda")
    cu = f" with CUDA {cuda}" if cuda else ""
    return f"torch {what}{cu} ({built_for.get('source') or 'source unknown'})"


def drift_line(built_for: dict[str, Any] | None, torch_info: dict[str, Any]) -> str:
    """'built for torch 2.9.1 (recipe pin ...), this env has torch 2.13.0+cpu'."""
    here = torch_text(torch_info)
    was = built_for_text(built_for)
    if was:
        return f"built for {was}, this env has {here}"
    return (
        f"built against another torch than this env's {here} "
        "(no build record, wheel pin or recipe pin says which)"
    )


def _cite(symbols: list[dict[str, Any]], variants: Any = None) -> str:
    """Up to MAX_CITED symbols, demangled, each with the installed torch's close variant."""
    parts = []
    for s in symbols[:MAX_CITED]:
        text = s.get("demangled") or s["name"]
        if "variant" not in s and variants is not None:
            s["variant"] = variants(s)
        if s.get("variant"):
            text += " [installed torch has {}]".format(s["variant"])
        parts.append(text)
    more = len(symbols) - MAX_CITED
    return ", ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def sort_causes(
    ext: dict[str, Any],
    torch_info: dict[str, Any],
    built_for: dict[str, Any] | None = None,
    provided: Any = None,
    variants: Any = None,
) -> list[dict[str, Any]]:
    """Every missing library, version and symbol of one .so, sorted into causes.

    Returns ``[{"cause", "reason", "libraries", "symbols"}]``, root causes first. ``ext`` holds
    ``missing_libs``, ``missing_versions``, ``needed``, loader errors and every missing
    symbol (``all_missing_symbols``, else ``missing_symbols``); ``provided(base)`` lists the
    sonames of a CUDA library (``libcudart``) this env has; ``variants(symbol)`` names the
    installed torch's closest definition of a missing torch symbol.
    """
    missing_libs = list(ext.get("missing_libs") or [])
    syms = list(ext.get("all_missing_symbols") or ext.get("missing_symbols") or [])
    versions = list(ext.get("missing_versions") or [])
    err = ext.get("dlopen_error") or ext.get("import_error") or ""
    # Fold in what the real loader said, in case the static read missed it.
    m = re.search(r"version `([^']+)' not found", err)
    if m and not any(v["version"] == m.group(1) for v in versions):
        lib_m = re.match(r"^\s*([^:]+):", err)
        versions.append(
            {"version": m.group(1), "library": os.path.basename(lib_m.group(1)) if lib_m else "?"}
        )
    m = re.search(r"([^\s:/]+): cannot open shared object file", err)
    if m and m.group(1) not in missing_libs:
        missing_libs.append(m.group(1))
    m = re.search(r"undefined symbol: (\S+)", err)
    if m and not any(s["name"] == m.group(1) for s in syms):
        syms.append({"name": m.group(1), "demangled": m.group(1), "expected_from": None})

    for s in syms:
        s.pop("cause", None)  # sorted afresh on every call
    causes: list[dict[str, Any]] = []

    def add(cause: str, reason: str, libs: list[str], symbols: list[dict[str, Any]]) -> None:
        for s in symbols:
            s["cause"] = cause
        causes.append(
            {
                "cause": cause,
                "reason": reason,
                "libraries": libs,
                "symbols": [s.get("demangled") or s["name"] for s in symbols[:MAX_CITED]],
                "symbols_total": len(symbols),
            }
        )

    for v in versions:
        if v["version"].startswith(("GLIBCXX_", "CXXABI_")):
            reason = "libstdc++ too old: {} lacks {} (built with a newer GCC; use a newer libstdc++, e.g. conda's, or build here)"
            kind = "libstdcxx_too_old"
        elif v["version"].startswith("GLIBC_"):
            reason, kind = "glibc too old: {} lacks {} (built on a newer distro)", "glibc_too_old"
        else:
            reason, kind = "{} lacks symbol version {}", "symbol_version"
        mine = [s for s in syms if s.get("version") == v["version"] and "cause" not in s]
        add(kind, reason.format(v["library"], v["version"]), [v["library"]], mine)

    left = [s for s in syms if "cause" not in s]
    here = torch_text(torch_info)
    cpu = torch_is_cpu_build(torch_info)
    needed = list(ext.get("needed") or [])

    def origin(s: dict[str, Any]) -> str:
        return str(s.get("expected_from") or "")

    # The C++11 string ABI: one flag decides every std::string in the signatures.
    abi_torch = torch_info.get("cxx11_abi")
    old = [s for s in left if uses_old_string(s["name"], s.get("demangled") or s["name"])]
    new = [s for s in left if "__cxx11" in s["name"]]
    if old and abi_torch is not False:
        add(
            "cxx11_abi",
            "C++11 ABI mismatch: built with _GLIBCXX_USE_CXX11_ABI=0 (old std::string in {}), {} uses the C++11 ABI".format(
                old[0].get("demangled") or old[0]["name"], here
            ),
            [],
            old,
        )
    elif new and abi_torch is False:
        add(
            "cxx11_abi",
            "C++11 ABI mismatch: built with the C++11 ABI ({}), {} uses _GLIBCXX_USE_CXX11_ABI=0".format(
                new[0].get("demangled") or new[0]["name"], here
            ),
            [],
            new,
        )
    left = [s for s in syms if "cause" not in s]

    # A CPU torch: its CUDA half (libc10_cuda, libtorch_cuda) is simply not there.
    cpu_libs = [lib for lib in missing_libs if lib.startswith(TORCH_CUDA_LIBS)]
    cpu_syms = [s for s in left if origin(s).startswith(TORCH_CUDA_LIBS)]
    if cpu and (cpu_libs or cpu_syms):
        if cpu_syms:
            need = "{} symbol(s) need them, e.g. {}".format(
                len(cpu_syms), cpu_syms[0].get("demangled") or cpu_syms[0]["name"]
            )
        else:
            need = "NEEDED: " + ", ".join(cpu_libs)
        add(
            "torch_cpu_build",
            f"{here} is a CPU build: libtorch_cuda/libc10_cuda are not there ({need})",
            cpu_libs,
            cpu_syms,
        )
        missing_libs = [lib for lib in missing_libs if lib not in cpu_libs]
    left = [s for s in syms if "cause" not in s]

    # ABI drift: torch symbols the installed torch does not define (the CUDA half of a
    # CPU torch is counted above).
    torchy = [s for s in left if is_torch_symbol(s["name"], s.get("demangled") or s["name"])]
    if torchy:
        torchy.sort(key=lambda s: (origin(s).startswith(TORCH_CUDA_LIBS), s["name"]))
        if variants is not None:
            # Those the installed torch has a close variant of say most: cite them first.
            for s in torchy[:20]:
                s["variant"] = variants(s)
            torchy.sort(key=lambda s: not s.get("variant"))
        add(
            "torch_abi",
            "{}: {} torch symbol(s) missing: {}".format(
                drift_line(built_for, torch_info), len(torchy), _cite(torchy, variants)
            ),
            [],
            torchy,
        )
    left = [s for s in syms if "cause" not in s]

    # CUDA libraries of one major: the env must provide that major.
    by_major: dict[int, list[str]] = {}
    for lib in missing_libs:
        parsed = cuda_lib_major(lib)
        if parsed:
            by_major.setdefault(parsed[1], []).append(lib)
    for major, libs in sorted(by_major.items()):
        have: list[str] = []
        if provided is not None:
            for lib in libs:
                parsed = cuda_lib_major(lib)
                have += [h for h in provided(parsed[0] if parsed else lib) if h not in have]
        cuda_syms = [s for s in left if origin(s) in libs]
        if have:
            majors = sorted({str(m[1]) for m in map(cuda_lib_major, have) if m})
            where = "this env provides CUDA {} ({})".format(" and ".join(majors), ", ".join(have))
        else:
            where = "this env provides none" + (
                " (CPU torch, no nvidia-* CUDA wheels)" if cpu else ""
            )
        add(
            "cuda_major",
            "needs CUDA {} libraries ({}): {}".format(major, ", ".join(libs), where),
            libs,
            cuda_syms,
        )
        missing_libs = [lib for lib in missing_libs if lib not in libs]
        left = [s for s in syms if "cause" not in s]

    cudart = [s for s in left if is_cudart_symbol(s["name"])]
    linked = [lib for lib in needed if lib.startswith("libcudart")]
    if cudart and not linked:
        add(
            "cudart_not_linked",
            f"not linked against cudart: undefined {cudart[0]['name']} (link -lcudart or cudart_static)",
            [],
            cudart,
        )
    elif cudart:
        add(
            "cudart_too_old",
            f"{linked[0]} lacks {cudart[0]['name']}: an older CUDA runtime than the build's",
            linked[:1],
            cudart,
        )
    left = [s for s in syms if "cause" not in s]

    for lib in missing_libs:
        if lib.startswith(DRIVER_LIBS):
            driver_syms = [s for s in left if re.match(r"^(cu[A-Z]|nvml)", s["name"])]
            add(
                "no_driver",
                f"{lib} (from the NVIDIA driver) not found: no driver on this host",
                [lib],
                driver_syms,
            )
        elif lib.startswith(("libc10", "libtorch")):
            add(
                "torch_lib_missing",
                f"{lib} not found even with torch loaded: {here} lacks it",
                [lib],
                [s for s in left if origin(s) == lib],
            )
        else:
            add(
                "library_missing",
                f"{lib} not found (RPATH/RUNPATH, LD_LIBRARY_PATH, ld.so.conf dirs, torch/lib searched)",
                [lib],
                [s for s in left if origin(s) == lib],
            )
        left = [s for s in syms if "cause" not in s]

    if left and not causes:
        s = left[0]
        add(
            "symbol_missing",
            "undefined symbol {} (expected from {})".format(
                s.get("demangled") or s["name"], s.get("expected_from") or "?"
            ),
            [],
            left,
        )
    if not causes and err:
        add("load_error", short_error(err), [], [])
    # Root causes first: a torch or C++ ABI that does not match explains the most.
    causes.sort(key=lambda c: CAUSE_ORDER.index(c["cause"]) if c["cause"] in CAUSE_ORDER else 99)
    return causes


def diagnose(
    ext: dict[str, Any],
    torch_info: dict[str, Any],
    built_for: dict[str, Any] | None = None,
    provided: Any = None,
    variants: Any = None,
) -> list[str]:
    """One line per cause of one extension's load problems (see :func:`sort_causes`)."""
    return [c["reason"] for c in sort_causes(ext, torch_info, built_for, provided, variants)]


def mangled_scope(name: str) -> str | None:
    """The mangled qualified name of a C++ function, without its signature.

    ``_ZNK2at10TensorBase14const_data_ptrIiTnNSt9enable_if...`` -> ``2at10TensorBase14const_data_ptr``;
    None for names this simple reader does not follow (substitutions, operators).
    """
    if name.startswith("_ZN"):
        i = 3
        while i < len(name) and name[i] in "rVKRO":
            i += 1
    elif name.startswith("_Z"):
        i = 2
    else:
        return None
    start = i
    if name.startswith("St", i):
        i += 2
    parts = 0
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        i = j + int(name[i:j])
        parts += 1
        if not name.startswith("_ZN"):
            break
    if not parts or i > len(name):
        return None
    if not name.startswith("_ZN"):
        return name[start:i]
    nxt = name[i : i + 2]
    if nxt in ("C1", "C2", "C3", "D0", "D1", "D2"):
        return name[start:i] + nxt[0]  # a constructor or destructor of that class
    if nxt[:1] in ("E", "I"):
        return name[start:i]
    return None  # an operator or something this reader does not follow


def close_variant(
    symbol: dict[str, Any], tables: list[dict[str, set[str]]], demangle: Any, limit: int = 400
) -> str | None:
    """The defined symbol of the same qualified name whose demangled text is closest."""
    import difflib

    scope = mangled_scope(symbol["name"])
    if not scope:
        return None
    want = symbol.get("demangled") or symbol["name"]
    candidates: list[str] = []
    for table in tables:
        for name in table:
            if scope[:-1] in name[: len(scope) + 8] and mangled_scope(name) == scope:
                candidates.append(name)
                if len(candidates) >= limit:
                    break
    best, best_ratio = None, 0.0
    for name in candidates:
        if name == symbol["name"]:
            continue
        text = demangle(name)
        ratio = difflib.SequenceMatcher(None, want, text).ratio()
        if ratio > best_ratio:
            best, best_ratio = text, ratio
    return best


# =============================================================================================
# Scripts run inside the target interpreter
# =============================================================================================

_PRELUDE = (
    "import json, os, sys\nMARK = "
    + repr(MARK)
    + "\n"
    + r"""
ARGS = json.loads(sys.argv[1])
def _err(e):
    text = "%s: %s" % (type(e).__name__, e)
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if len(lines) == 1 else " | ".join(lines[-3:])
def _emit(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()
"""
)

INSPECT_SRC = (
    _PRELUDE
    + "PROVENANCE_FILE = "
    + repr(PROVENANCE_FILE)
    + "\n"
    + r"""
import re, site, importlib.machinery, importlib.util
import importlib.metadata as md
def norm(n):
    return re.sub(r"[-_.]+", "-", n).lower()
dists = {}
for d in md.distributions():
    try:
        name = d.metadata["Name"]
    except Exception:
        name = None
    if name and norm(name) not in dists:
        dists[norm(name)] = d
out = {"executable": os.path.realpath(sys.executable), "version": sys.version.split()[0],
       "ext_suffixes": list(importlib.machinery.EXTENSION_SUFFIXES), "packages": {},
       "site_packages": [], "torch_dir": None, "torch_dist_version": None}
try:
    out["site_packages"] = list(site.getsitepackages())
except Exception:
    pass
try:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        out["torch_dir"] = os.path.dirname(os.path.realpath(spec.origin))
    out["torch_dist_version"] = md.version("torch")
except Exception:
    pass
shlib = re.compile(r"\.so(\.\d+)*$")
for name in ARGS["packages"]:
    d = dists.get(norm(name))
    if d is None:
        out["packages"][name] = {"installed": False}
        continue
    files = list(d.files or [])
    libs, tops = [], set()
    for f in files:
        rel = f.as_posix()
        if rel.startswith("..") or ".dist-info/" in rel or "__pycache__" in rel:
            continue
        first = rel.split("/")[0]
        if rel.endswith(".py") or shlib.search(rel):
            tops.add(first[:-3] if first.endswith(".py") else first)
        if not shlib.search(rel):
            continue
        mod = None
        for suf in sorted(out["ext_suffixes"], key=len, reverse=True):
            if rel.endswith(suf):
                mod = rel[: -len(suf)].replace("/", ".")
                break
        libs.append({"path": os.path.realpath(str(f.locate())), "rel": rel, "module": mod})
    top_txt = d.read_text("top_level.txt")
    if top_txt:
        tops = set(t.strip() for t in top_txt.splitlines() if t.strip() and not t.startswith("_")) or tops
    base = os.path.realpath(str(d.locate_file("")))
    top_list = []
    for t in sorted(tops):
        if "." in t or t.endswith(".so") or shlib.search(t):
            continue
        if os.path.isdir(os.path.join(base, t)) or os.path.isfile(os.path.join(base, t + ".py")):
            top_list.append(t)
        elif any(l["module"] == t for l in libs):
            top_list.append(t)
    provenance = None
    try:
        text = d.read_text(PROVENANCE_FILE)
        if text is not None:
            provenance = json.loads(text)
            if not isinstance(provenance, dict):
                provenance = {"error": "%s is not a JSON object" % PROVENANCE_FILE}
    except Exception as e:
        provenance = {"error": "%s unreadable: %s" % (PROVENANCE_FILE, _err(e))}
    out["packages"][name] = {"installed": True, "version": d.version, "requires": list(d.requires or []),
                             "location": base, "top_level": top_list, "libraries": libs,
                             "provenance": provenance}
_emit(out)
"""
)

TORCH_SRC = (
    _PRELUDE
    + r"""
out = {}
try:
    import torch
    out["version"] = torch.__version__
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    out["cxx11_abi"] = None if abi is None else bool(abi)
    out["cuda"] = getattr(torch.version, "cuda", None)
    out["dir"] = os.path.dirname(os.path.realpath(torch.__file__))
    out["cuda_available"] = None
    if ARGS.get("gpu"):
        out["cuda_available"] = bool(torch.cuda.is_available())
        if out["cuda_available"]:
            cap = torch.cuda.get_device_capability(0)
            out["capability"] = "%d.%d" % (cap[0], cap[1])
            out["device_name"] = torch.cuda.get_device_name(0)
except BaseException as e:
    out["error"] = _err(e)
_emit(out)
"""
)

LOAD_SRC = (
    _PRELUDE
    + r"""
out = {"torch": None, "import": None, "dlopen": None}
if ARGS["with_torch"]:
    try:
        import torch
    except BaseException as e:
        out["torch"] = _err(e)
if ARGS.get("module"):
    try:
        import importlib, importlib.util
        if ARGS["kind"] == "extension":
            spec = importlib.util.spec_from_file_location(ARGS["module"], ARGS["path"])
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            importlib.import_module(ARGS["module"])
    except BaseException as e:
        out["import"] = _err(e)
if ARGS.get("dlopen"):
    import ctypes
    try:
        ctypes.CDLL(ARGS["dlopen"], mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        out["dlopen"] = str(e)
_emit(out)
"""
)

# Evaluates an arch-dispatching loader without a GPU: torch.cuda answers with a fake device of
# the requested capability, and every extension load is recorded in order.
LOADER_SRC = (
    _PRELUDE
    + r"""
import importlib, importlib.machinery
out = {"attempts": [], "error": None, "torch_error": None}
major, minor = ARGS["cc"]
try:
    import torch
    class _Props(object):
        pass
    props = _Props()
    props.major, props.minor, props.name = major, minor, "sm120kit fake GPU %d.%d" % (major, minor)
    props.multi_processor_count, props.total_memory = 1, 1 << 30
    c = torch.cuda
    c.is_available = lambda: True
    c.device_count = lambda: 1
    c.current_device = lambda: 0
    c.set_device = lambda *a, **k: None
    c.get_device_capability = lambda *a, **k: (major, minor)
    c.get_device_properties = lambda *a, **k: props
    c.get_device_name = lambda *a, **k: props.name
except BaseException as e:
    out["torch_error"] = _err(e)
_orig = importlib.machinery.ExtensionFileLoader.create_module
def _create(self, spec):
    rec = {"path": os.path.realpath(spec.origin), "name": spec.name, "error": None}
    out["attempts"].append(rec)
    try:
        return _orig(self, spec)
    except BaseException as e:
        rec["error"] = _err(e)
        raise
importlib.machinery.ExtensionFileLoader.create_module = _create
import ctypes
_cdll_init = ctypes.CDLL.__init__
def _cdll(self, name, *a, **k):
    rec = {"path": os.path.realpath(name) if name else name, "name": None, "error": None, "ctypes": True}
    out["attempts"].append(rec)
    try:
        return _cdll_init(self, name, *a, **k)
    except BaseException as e:
        rec["error"] = _err(e)
        raise
ctypes.CDLL.__init__ = _cdll
try:
    importlib.import_module(ARGS["package"])
except BaseException as e:
    out["error"] = _err(e)
_emit(out)
"""
)

DEFAULT_GPU_OPS = {
    # The bundled sample kernel: add one to a CUDA tensor through its torch op.
    "minikernel": r"""
import torch, minikernel
x = torch.arange(1024, device="cuda", dtype=torch.float32)
fn = getattr(minikernel, "add_one", None)
if fn is None:
    fn = torch.ops.minikernel.add_one
y = fn(x)
torch.cuda.synchronize()
assert torch.equal(y.cpu(), x.cpu() + 1), "wrong result"
""",
}

GPU_SRC = (
    _PRELUDE
    + r"""
out = {"error": None}
try:
    exec(compile(ARGS["code"], "<gpu-op>", "exec"), {"__name__": "__sm120kit_gpu_op__"})
except BaseException as e:
    out["error"] = _err(e)
_emit(out)
"""
)


def run_target(
    python: str, src: str, args: dict[str, Any], timeout: float, env: dict[str, str] | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """Run ``src`` under ``python``; (its JSON result, None) or (None, one-line failure)."""
    try:
        proc = subprocess.run(
            [python, "-c", src, json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f}s"
    except OSError as e:
        return None, f"cannot run {python}: {e}"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            try:
                return json.loads(line[len(MARK) :]), None
            except ValueError:
                break
    if proc.returncode < 0:
        return None, f"killed by signal {-proc.returncode}"
    return None, short_error(proc.stderr or proc.stdout or f"exit {proc.returncode}")


# =============================================================================================
# The checks
# =============================================================================================


#: Memory one probe subprocess may take: an interpreter that imported torch and a big .so.
JOB_MEMORY = 1 << 30


def default_jobs() -> int:
    """Fresh interpreters at once: one per CPU, as many as the available memory holds."""
    cpus = os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return max(1, min(cpus, int(line.split()[1]) * 1024 // JOB_MEMORY))
    except (OSError, ValueError, IndexError):
        pass
    return max(1, min(cpus, 4))


class Context:
    """What every check shares: the target interpreter, torch, the loader's view of the host."""

    def __init__(
        self, args: dict[str, Any], env_info: dict[str, Any], torch_info: dict[str, Any]
    ) -> None:
        self.args = args
        self.python = args["python"]
        self.timeout = float(args.get("timeout") or 300)
        self.jobs = int(args.get("jobs") or default_jobs())
        self.env_info = env_info
        self.torch = torch_info
        self.resolver = Resolver(os.environ.get("LD_LIBRARY_PATH", ""), system_lib_dirs())
        self.demangle = Demangler()
        self.torch_dir = torch_info.get("dir") or env_info.get("torch_dir")
        # What `import torch` loads: torch._C's NEEDED closure, plus the libraries it loads
        # with RTLD_GLOBAL (libtorch_global_deps), plus the nvidia wheels' libraries.
        self.preloaded: dict[str, str] = {}
        self.global_scope: list[str] = []
        exe = env_info.get("executable") or self.python
        exe_found, _ = self.resolver.closure(exe, None)
        self.global_scope = [exe] + list(exe_found.values())
        if self.torch_dir:
            for c in sorted(glob.glob(os.path.join(self.torch_dir, "_C*.so"))):
                found, _ = self.resolver.closure(c, None)
                self.preloaded.update(found)
            gdeps = os.path.join(self.torch_dir, "lib", "libtorch_global_deps.so")
            if os.path.isfile(gdeps):
                found, _ = self.resolver.closure(gdeps, None)
                self.preloaded["libtorch_global_deps.so"] = gdeps
                self.preloaded.update(found)
                self.global_scope += [gdeps] + list(found.values())
            for lib in sorted(
                glob.glob(os.path.join(self.torch_dir, "..", "nvidia", "*", "lib", "*.so*"))
            ):
                self.preloaded.setdefault(os.path.basename(lib), os.path.realpath(lib))
        self.arch_source = "args"
        cc = parse_cc(args.get("arch"))
        if cc is None and torch_info.get("capability"):
            cc = parse_cc(torch_info["capability"])
            self.arch_source = "gpu"
        if cc is None:
            self.arch_source = "none"
        self.cc = cc
        self._torch_tables: list[dict[str, set[str]]] | None = None
        self._provided: dict[str, list[str]] = {}
        self._variants: dict[str, str | None] = {}

    def lib_dirs(self) -> list[str]:
        """Where this env's CUDA libraries can come from: torch's nvidia-* wheels, then the
        loader's own search path."""
        dirs: list[str] = []
        if self.torch_dir:
            dirs += sorted(glob.glob(os.path.join(self.torch_dir, "..", "nvidia", "*", "lib")))
            dirs += sorted(glob.glob(os.path.join(self.torch_dir, "..", "nvidia", "*", "*", "lib")))
        for sp in self.env_info.get("site_packages") or []:
            dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
        dirs += self.resolver.env_dirs + self.resolver.sys_dirs
        out: list[str] = []
        for d in dirs:
            real = os.path.realpath(d)
            if real not in out and os.path.isdir(real):
                out.append(real)
        return out

    def provided(self, base: str) -> list[str]:
        """Sonames of CUDA library ``base`` (``libcudart``) this env has, e.g. libcudart.so.13."""
        if base not in self._provided:
            found: list[str] = []
            for d in self.lib_dirs():
                for path in sorted(glob.glob(os.path.join(d, base + ".so.*"))):
                    m = re.match(r"^(.+\.so\.\d+)", os.path.basename(path))
                    if m and m.group(1) not in found:
                        found.append(m.group(1))
            self._provided[base] = found
        return self._provided[base]

    def torch_tables(self) -> list[dict[str, set[str]]]:
        """Defined dynamic symbols of the installed torch's libraries (for close variants)."""
        if self._torch_tables is None:
            self._torch_tables = []
            if self.torch_dir:
                for path in sorted(glob.glob(os.path.join(self.torch_dir, "lib", "lib*.so*"))):
                    name = os.path.basename(path)
                    if not name.startswith(("libc10", "libtorch")):
                        continue
                    elf = open_elf(path)
                    if elf is not None:
                        self._torch_tables.append(elf.symbols()[1])
        return self._torch_tables

    def variant(self, symbol: dict[str, Any]) -> str | None:
        """The installed torch's closest definition of a missing torch symbol (memoized: the
        same symbol goes missing from many .so files of one package)."""
        if symbol["name"] not in self._variants:
            self._variants[symbol["name"]] = close_variant(
                symbol, self.torch_tables(), self.demangle
            )
        return self._variants[symbol["name"]]


def static_extension(ctx: Context, path: str) -> dict[str, Any]:
    """Static loader view of one .so after torch: NEEDED, missing libraries, symbols, versions."""
    ext: dict[str, Any] = {
        "path": path,
        "needed": [],
        "missing_libs": [],
        "needs_torch_loaded": [],
        "missing_symbols": [],
        "missing_symbols_total": 0,
        "missing_versions": [],
        "sass": [],
        "ptx": [],
        "dlopen_error": None,
        "import_error": None,
        "import_alone_error": None,
        "module": None,
    }
    elf = open_elf(path)
    if elf is None:
        ext["elf_error"] = "not a readable ELF file"
        return ext
    dyn = elf.dynamic()
    ext["needed"] = list(dyn["needed"])
    ext["rpath"] = list(dyn["rpath"])
    ext["runpath"] = list(dyn["runpath"])
    found, missing = ctx.resolver.closure(path, ctx.preloaded)
    ext["missing_libs"] = [name for name, _ in missing]
    _alone, missing_alone = ctx.resolver.closure(path, None)
    ext["needs_torch_loaded"] = [n for n, _ in missing_alone if n not in ext["missing_libs"]]
    ext["sass"], ext["ptx"], ext["has_fatbin"] = device_targets(path)

    undefined, _defined = elf.symbols()
    _defs, needs, _ = elf.versions()
    verfile = {v: f for f, v in needs.values()}
    # Versions each NEEDED file must define (the loader checks these first).
    for fname, vname in sorted(set(needs.values())):
        lib_path = found.get(fname)
        lib = open_elf(lib_path) if lib_path else None
        if lib is not None and vname not in lib.versions()[2]:
            ext["missing_versions"].append({"version": vname, "library": fname, "path": lib_path})
    scope = [path] + ctx.global_scope + list(found.values())
    tables = []
    seen: set[str] = set()
    for p in scope:
        real = os.path.realpath(p)
        if real in seen:
            continue
        seen.add(real)
        obj = open_elf(p)
        if obj is not None:
            tables.append(obj.symbols()[1])
    missing_syms = []
    for name, version, weak in undefined:
        if weak:
            continue
        want = version or ""
        if any(want in vs or "*" in vs for vs in (t.get(name, ()) for t in tables)):
            continue
        missing_syms.append((name, version))
    ext["missing_symbols_total"] = len(missing_syms)
    # Every one is kept until the causes are sorted (check_undefined), then the list is cut.
    for name, version in missing_syms[:MAX_SCANNED_SYMBOLS]:
        dem = ctx.demangle(name)
        ext["missing_symbols"].append(
            {
                "name": name,
                "demangled": dem,
                "version": version,
                "expected_from": expected_from(
                    name, dem, version, ext["needed"], verfile.get(version) if version else None
                ),
            }
        )
    return ext


def exports(path: str, symbol: str) -> bool:
    """Whether the ELF file defines dynamic ``symbol``."""
    elf = open_elf(path)
    return elf is not None and symbol in elf.symbols()[1]


def requires_torch(requires: list[str]) -> str | None:
    """'==2.9.1' from a Requires-Dist list, '' when torch is required without a version."""
    for req in requires:
        m = re.match(
            r"^\s*torch(?![\w.-])\s*(?:\[[^\]]*\])?\s*\(?\s*([^;)]*)\)?\s*(;.*)?$", req, re.I
        )
        if m:
            spec = m.group(1).strip().replace(" ", "")
            return spec or ""
    return None


def check_import_order(ctx: Context, modules: list[dict[str, Any]]) -> dict[str, Any]:
    """Every module after ``import torch`` and alone."""
    details = {"modules": modules}
    if not modules:
        return {
            "check": "import_order",
            "status": "skip",
            "reason": "no importable modules",
            "details": details,
        }
    terr = ctx.torch.get("error")
    judged = [m for m in modules if not m.get("not_for_arch")]
    failed = [m for m in judged if m["with_torch"]]
    if failed:
        m = failed[0]
        reason = "{} fails even after import torch: {}".format(
            m["module"],
            short_error(m["with_torch"]),
        )
        if terr:
            reason = f"import torch failed: {short_error(terr)}"
        return {"check": "import_order", "status": "fail", "reason": reason, "details": details}
    alone = [m for m in judged if m["alone"]]
    if alone:
        m = alone[0]
        err = short_error(m["alone"])
        hint = " (no RPATH into torch/lib)" if re.search(r"lib(c10|torch)\w*\.so", err) else ""
        reason = "needs torch first: {} alone fails: {}{}".format(m["module"], err, hint)
        return {"check": "import_order", "status": "warn", "reason": reason, "details": details}
    return {
        "check": "import_order",
        "status": "pass",
        "reason": f"{len(modules)} module(s) import alone and after torch",
        "details": details,
    }


def check_undefined(
    ctx: Context,
    exts: list[dict[str, Any]],
    built_for: dict[str, Any] | None,
    not_for_arch: dict[str, str] | None = None,
    first: str | None = None,
) -> dict[str, Any]:
    """Missing libraries, versions and symbols of every shipped .so after torch, sorted into
    causes. A .so the recipe declares not for this arch is listed, not judged."""
    if not exts:
        return {
            "check": "undefined_symbols",
            "status": "skip",
            "reason": "no shared objects",
            "details": {},
        }
    skip = not_for_arch or {}
    bad = []
    for ext in exts:
        problems = (
            ext["missing_libs"]
            or ext["missing_symbols"]
            or ext["missing_versions"]
            or ext["dlopen_error"]
        )
        if problems:
            causes = sort_causes(ext, ctx.torch, built_for, ctx.provided, ctx.variant)
            ext["causes"] = causes
            ext["diagnosis"] = [c["reason"] for c in causes]
            order = {c["cause"]: i for i, c in enumerate(causes)}
            ext["missing_symbols"].sort(key=lambda sym: order.get(sym.get("cause"), len(order)))
            bad.append(ext)
        del ext["missing_symbols"][MAX_LISTED_SYMBOLS:]
    where = cc_text(ctx.cc) if ctx.cc else "this arch"
    judged = [e for e in bad if e["path"] not in skip]
    # The file the package's loader picks first, then extension modules, then the rest.
    judged.sort(key=lambda e: (e["path"] != first, not e.get("module"), e.get("rel") or ""))
    details = {
        "checked": len(exts),
        "failing": [
            {
                "path": e["path"],
                "rel": e.get("rel"),
                "causes": [c["cause"] for c in e.get("causes", [])],
                "diagnosis": e.get("diagnosis", []),
                "dlopen_error": e["dlopen_error"],
            }
            for e in judged
        ],
        "not_judged": [
            {
                "path": e["path"],
                "rel": e.get("rel"),
                "status": "info",
                "reason": f"not for {where} by design, not judged: {skip[e['path']]}",
                "diagnosis": e.get("diagnosis", []),
            }
            for e in bad
            if e["path"] in skip
        ],
    }
    if not judged:
        extra = f" ({len(bad)} not for {where} by design, not judged)" if bad else ""
        return {
            "check": "undefined_symbols",
            "status": "pass",
            "reason": f"{len(exts) - len(bad)} shared object(s) resolve every symbol after torch{extra}",
            "details": details,
        }
    head = judged[0]
    diag = head.get("diagnosis") or ["does not load"]
    more = f" (+{len(judged) - 1} more .so)" if len(judged) > 1 else ""
    reason = "{}: {}{}".format(head.get("rel") or head["path"], "; ".join(diag), more)
    return {"check": "undefined_symbols", "status": "fail", "reason": reason, "details": details}


_RANK = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}


def check_arch(
    ctx: Context,
    exts: list[dict[str, Any]],
    excluded: dict[str, str],
    not_for_arch: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Whether each .so with device code carries SASS (or PTX) for the GPU.

    ``excluded``: variant files the loader does not pick for this capability (not judged);
    ``not_for_arch``: files the recipe declares carry no code for this arch by design (info).
    """
    with_code = [e for e in exts if e["sass"] or e["ptx"]]
    declared = not_for_arch or {}
    details: dict[str, Any] = {
        "arch": cc_text(ctx.cc) if ctx.cc else None,
        "files": [],
        "not_loaded": excluded,
    }
    if not with_code:
        return {
            "check": "arch_coverage",
            "status": "skip",
            "reason": "no device code",
            "details": details,
        }
    if ctx.cc is None:
        targets = sorted({t for e in with_code for t in e["sass"] + e["ptx"]}, key=_target_key)
        return {
            "check": "arch_coverage",
            "status": "skip",
            "reason": "no compute capability given (device code for {})".format(", ".join(targets)),
            "details": details,
        }
    where = cc_text(ctx.cc)
    worst = ("pass", "", "")
    infos = []
    for ext in with_code:
        if ext["path"] in excluded:
            continue
        status, reason = arch_verdict(ext["sass"], ext["ptx"], ctx.cc)
        label = ext.get("rel") or ext["path"]
        if ext["path"] in declared:
            have = ", ".join(ext["sass"] + ext["ptx"])
            reason = f"not for {where} by design: {declared[ext['path']]} (has {have})"
            details["files"].append(
                {"path": ext["path"], "rel": label, "status": "info", "reason": reason}
            )
            infos.append(label)
            continue
        details["files"].append(
            {"path": ext["path"], "rel": label, "status": status, "reason": reason}
        )
        if _RANK[status] > _RANK[worst[0]] or not worst[1]:
            worst = (status, reason, label)
    info_text = ""
    if infos:
        names = ", ".join(os.path.basename(i).split(".")[0] for i in infos)
        info_text = f"; {len(infos)} not for {where} by design ({names})"
    if not worst[1]:
        return {
            "check": "arch_coverage",
            "status": "skip",
            "reason": "no device code on the load path" + info_text,
            "details": details,
        }
    n = len(details["files"]) - len(infos)
    if worst[0] == "pass":
        reason = f"{n} .so with device code, all run on {where}"
        if n == 1:
            reason = f"{worst[2]}: {worst[1]}"
    else:
        reason = f"{worst[2]}: {worst[1]}"
    return {
        "check": "arch_coverage",
        "status": worst[0],
        "reason": reason + info_text,
        "details": details,
    }


VARIANT_DIR_RE = re.compile(r"(^|/)sm\d+[a-z]?/[^/]+$")


def variant_libraries(libs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Extension modules living in sm<NN>/ directories: one build per arch family."""
    return [lib for lib in libs if lib.get("module") and VARIANT_DIR_RE.search(lib["rel"])]


def check_loader(
    ctx: Context, info: dict[str, Any], exts: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Which sm*/ variant the package's own loader picks for the capability; its arch verdict."""
    variants = variant_libraries(info["libraries"])
    none: dict[str, str] = {}
    if not variants:
        return {
            "check": "loader",
            "status": "skip",
            "reason": "no per-arch variant directories",
            "details": {},
        }, none
    details: dict[str, Any] = {"variants": [v["rel"] for v in variants]}
    if ctx.cc is None:
        return {
            "check": "loader",
            "status": "skip",
            "reason": "no compute capability given",
            "details": details,
        }, none
    package = variants[0]["rel"].split("/")[0]
    res, err = run_target(
        ctx.python, LOADER_SRC, {"cc": list(ctx.cc), "package": package}, ctx.timeout
    )
    if res is None:
        return {
            "check": "loader",
            "status": "fail",
            "reason": f"loader probe failed: {err}",
            "details": details,
        }, none
    location = info["location"]
    variant_paths = {os.path.realpath(os.path.join(location, v["rel"])): v["rel"] for v in variants}
    pkg_dir = os.path.realpath(os.path.join(location, package)) + os.sep
    attempts = [a for a in res["attempts"] if a.get("path") and a["path"].startswith(pkg_dir)]
    details["capability"] = cc_text(ctx.cc)
    details["attempts"] = [
        {"rel": os.path.relpath(a["path"], location), "error": a["error"]} for a in attempts
    ]
    details["package_import_error"] = res.get("error")
    if not attempts:
        reason = f"the loader tried no file under {package}/ for {cc_text(ctx.cc)}"
        if res.get("error"):
            reason += ": " + short_error(res["error"])
        return {"check": "loader", "status": "fail", "reason": reason, "details": details}, none
    intended = attempts[0]["path"]
    loaded = next((a["path"] for a in attempts if a["error"] is None), None)
    rel = os.path.relpath(intended, location)
    details["chosen"] = rel
    details["loaded"] = os.path.relpath(loaded, location) if loaded else None
    ext = exts.get(intended) or {"sass": [], "ptx": []}
    details["chosen_sass"], details["chosen_ptx"] = ext["sass"], ext["ptx"]
    excluded = {
        p: f"not chosen by the loader for {cc_text(ctx.cc)}" for p in variant_paths if p != intended
    }
    status, why = arch_verdict(ext["sass"], ext["ptx"], ctx.cc)
    if status == "skip":
        status, why = "fail", "it has no device code"
    reason = f"loader picks {rel} for {cc_text(ctx.cc)}: {why}"
    if status != "pass":
        better = [
            variant_paths[p] for p in variant_paths
            if p != intended and arch_verdict(exts.get(p, {}).get("sass", []), [], ctx.cc)[0] == "pass"
        ]  # fmt: skip
        if better:
            reason += (
                f"; {better[0]} would run: this loader maps the GPU to the wrong directory "
                "(patches/sgl-kernel/0001-load-utils-sm120.patch makes 12.x pick the one "
                "holding sm_120 code)"
            )
        else:
            reason += f"; no variant here runs on {cc_text(ctx.cc)}: build one for it"
    if loaded != intended:
        first_err = attempts[0]["error"] or "?"
        reason += f"; loading it failed ({short_error(first_err, 120)})"
        status = "fail"
    return {"check": "loader", "status": status, "reason": reason, "details": details}, excluded


def check_gpu(ctx: Context, name: str) -> dict[str, Any]:
    """One tiny real op, only with a working GPU."""
    if not ctx.args.get("gpu"):
        return {
            "check": "gpu_op",
            "status": "skip",
            "reason": "no GPU run requested (gpu=false)",
            "details": {},
        }
    if not ctx.torch.get("cuda_available"):
        return {
            "check": "gpu_op",
            "status": "skip",
            "reason": "torch.cuda.is_available() is False in the target env",
            "details": {},
        }
    ops = dict(DEFAULT_GPU_OPS)
    ops.update(ctx.args.get("gpu_ops") or {})
    code = ops.get(name)
    if not code:
        return {
            "check": "gpu_op",
            "status": "skip",
            "reason": f"no known op for {name}",
            "details": {},
        }
    res, err = run_target(ctx.python, GPU_SRC, {"code": code}, ctx.timeout)
    error = err if res is None else res.get("error")
    if error:
        return {
            "check": "gpu_op",
            "status": "fail",
            "reason": short_error(error),
            "details": {"error": error},
        }
    return {
        "check": "gpu_op",
        "status": "pass",
        "reason": "op ran on {}".format(ctx.torch.get("device_name", "the GPU")),
        "details": {},
    }


def probe_package(
    ctx: Context, name: str, info: dict[str, Any], pool: ThreadPoolExecutor
) -> dict[str, Any]:
    """All checks for one installed distribution."""
    pin = requires_torch(info.get("requires") or [])
    declared = (ctx.args.get("declared") or {}).get(name) or {}
    built_for = package_built_for(name, info, declared)
    libs = info["libraries"]
    exts = {lib["path"]: static_extension(ctx, lib["path"]) for lib in libs}
    for lib in libs:
        exts[lib["path"]]["rel"] = lib["rel"]
    for lib in libs:
        mod = lib.get("module")
        if mod and exports(lib["path"], "PyInit_" + mod.rsplit(".", 1)[-1]):
            exts[lib["path"]]["module"] = mod
        else:
            lib["module"] = None
    skip = not_for_arch(ctx, libs, declared)
    ext_modules = {e["module"] for e in exts.values() if e["module"]}
    tops = [t for t in info.get("top_level") or [] if t not in ext_modules]

    jobs = []
    for t in tops:
        base = {"module": t, "kind": "package"}
        jobs.append(
            (
                "top",
                t,
                True,
                pool.submit(
                    run_target, ctx.python, LOAD_SRC, dict(base, with_torch=True), ctx.timeout
                ),
            )
        )
        jobs.append(
            (
                "top",
                t,
                False,
                pool.submit(
                    run_target, ctx.python, LOAD_SRC, dict(base, with_torch=False), ctx.timeout
                ),
            )
        )
    for path, ext in exts.items():
        if ext.get("elf_error"):
            continue
        base = {"module": ext["module"], "kind": "extension", "path": path}
        jobs.append(
            (
                "so",
                path,
                True,
                pool.submit(
                    run_target,
                    ctx.python,
                    LOAD_SRC,
                    dict(base, with_torch=True, dlopen=path),
                    ctx.timeout,
                ),
            )
        )
        if ext["module"]:
            jobs.append(
                (
                    "so",
                    path,
                    False,
                    pool.submit(
                        run_target, ctx.python, LOAD_SRC, dict(base, with_torch=False), ctx.timeout
                    ),
                )
            )
    modules: dict[str, dict[str, Any]] = {}
    for kind, key, with_torch, fut in jobs:
        res, err = fut.result()
        if res is None:
            res = {"import": f"probe subprocess failed: {err}", "dlopen": None, "torch": None}
        if kind == "so":
            ext = exts[key]
            if with_torch:
                ext["dlopen_error"] = res.get("dlopen")
                ext["import_error"] = res.get("import") if ext["module"] else None
            else:
                ext["import_alone_error"] = res.get("import")
            if not ext["module"]:
                continue
            mod = modules.setdefault(
                key,
                {
                    "module": ext["module"],
                    "kind": "extension",
                    "path": key,
                    "with_torch": None,
                    "alone": None,
                    "not_for_arch": skip.get(key),
                },
            )
        else:
            mod = modules.setdefault(
                key, {"module": key, "kind": "package", "with_torch": None, "alone": None}
            )
        mod["with_torch" if with_torch else "alone"] = res.get("import")

    ext_list = list(exts.values())
    loader, excluded = check_loader(ctx, info, exts)
    chosen = (loader.get("details") or {}).get("chosen")
    first = os.path.realpath(os.path.join(info["location"], chosen)) if chosen else None
    checks = [
        check_import_order(ctx, list(modules.values())),
        check_undefined(ctx, ext_list, built_for, skip, first),
        check_arch(ctx, ext_list, excluded, skip),
        loader,
        check_gpu(ctx, name),
    ]
    return {
        "installed": True,
        "version": info.get("version"),
        "requires_torch": pin or None,
        "location": info.get("location"),
        "provenance": info.get("provenance"),
        "built_for": built_for,
        "torch": torch_summary(built_for, ctx.torch),
        "declared": {
            "source": declared.get("source"),
            "not_for_arch": {
                (os.path.relpath(p, info["location"])): why for p, why in sorted(skip.items())
            },
        }
        if declared
        else None,
        "checks": checks,
        "extensions": ext_list,
    }


def torch_summary(built_for: dict[str, Any] | None, torch_info: dict[str, Any]) -> dict[str, Any]:
    """Which torch the package was built for and which this env has, side by side."""
    spec = str((built_for or {}).get("torch") or "")
    return {
        "built_for": (spec[2:] if spec.startswith("==") else spec) or None,
        "built_for_source": (built_for or {}).get("source"),
        "installed": torch_info.get("version"),
        "installed_cuda": torch_info.get("cuda"),
        "cpu_build": torch_is_cpu_build(torch_info),
        "summary": drift_line(built_for, torch_info)
        if built_for
        else "built for an unknown torch (no build record, wheel pin or recipe pin), this env has "
        + torch_text(torch_info),
    }


def _public(version: Any) -> str:
    return str(version or "").split("+", 1)[0]


def package_built_for(
    name: str, info: dict[str, Any], declared: dict[str, Any]
) -> dict[str, Any] | None:
    """Which torch the package was built for, and what says so.

    The build record sm120kit writes into the wheel wins; then a ``torch`` pin in the wheel's
    Requires-Dist; then the recipe's torch pin for this package version (wheels built
    elsewhere, like PyPI's sgl-kernel, whose metadata pins no torch at all).
    """
    prov = info.get("provenance")
    if isinstance(prov, dict) and isinstance(prov.get("torch"), dict):
        version = prov["torch"].get("version")
        if version:
            return {
                "torch": "==" + str(version),
                "cuda": prov["torch"].get("cuda"),
                "source": f"build record {PROVENANCE_FILE}",
            }
    pin = requires_torch(info.get("requires") or [])
    if pin:
        return {"torch": pin, "cuda": None, "source": f"wheel metadata: Requires-Dist torch{pin}"}
    spec = declared.get("torch")
    if spec and _public(declared.get("version")) == _public(info.get("version")):
        return {
            "torch": str(spec),
            "cuda": None,
            "source": "recipe pin for {} {}".format(name, declared.get("version")),
            "recipe": declared.get("recipe"),
        }
    return None


def not_for_arch(
    ctx: Context, libs: list[dict[str, Any]], declared: dict[str, Any]
) -> dict[str, str]:
    """{path: reason} of the .so files the recipe declares carry no code for the judged arch.

    A declaration applies only when the capability judged is one the recipe targets. Keys are
    module names (``flash_ops``, ``sgl_kernel.flash_ops``) or paths inside the distribution.
    """
    table = declared.get("not_for_arch") or {}
    if not table or ctx.cc is None:
        return {}
    targets = set()
    for arch in declared.get("arch") or []:
        m = re.match(r"^(\d+)\.(\d+)", str(arch))
        if m:
            targets.add((int(m.group(1)), int(m.group(2))))
    if ctx.cc not in targets:
        return {}
    out: dict[str, str] = {}
    for lib in libs:
        rel = lib["rel"]
        stem = os.path.basename(rel).split(".")[0]
        dotted = rel.rsplit("/", 1)[0].replace("/", ".") + "." + stem if "/" in rel else stem
        for key, why in table.items():
            if key in (stem, dotted, rel) or dotted.endswith("." + key):
                out[lib["path"]] = str(why)
                break
    return out


def resolve_python(given: str | None) -> tuple[str, str | None]:
    """(interpreter path, None) for a python path, a venv/prefix directory or a command name;
    (what was given, one-line reason) when no interpreter is there."""
    if not given:
        return sys.executable, None
    path = os.path.expanduser(given)
    if os.sep not in path:
        found = shutil.which(path)
        if not found:
            return given, f"no Python interpreter '{given}' on PATH"
        path = found
    if os.path.isdir(path):
        for name in ("bin/python", "bin/python3"):
            candidate = os.path.join(path, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate, None
        if not os.path.exists(os.path.join(path, "bin")):
            return given, f"{given} is a directory without bin/python (not a venv)"
        return given, f"{given}/bin has no python executable"
    if not os.path.exists(path):
        return given, f"no Python interpreter at {given} (does not exist)"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return given, f"{given} is not an executable file"
    return path, None


def probe(args: dict[str, Any]) -> dict[str, Any]:
    """Run every check; the JSON-ready result."""
    python, missing = resolve_python(args.get("python"))
    args = dict(args, python=python)
    packages = list(args.get("packages") or [])
    out: dict[str, Any] = {"probe_version": PROBE_VERSION, "python": python, "packages": {}}
    if missing:
        out["error"] = missing
        out["missing_python"] = True
        return out
    timeout = float(args.get("timeout") or 300)
    env_info, err = run_target(python, INSPECT_SRC, {"packages": packages}, timeout)
    if env_info is None:
        out["error"] = f"cannot inspect {python}: {err}"
        return out
    torch_info, err = run_target(python, TORCH_SRC, {"gpu": bool(args.get("gpu"))}, timeout)
    if torch_info is None:
        torch_info = {"error": err}
    out["python_version"] = env_info.get("version")
    out["torch"] = {
        k: torch_info.get(k)
        for k in ("version", "cxx11_abi", "cuda", "cuda_available", "capability", "error")
    }
    if out["torch"]["version"] is None and env_info.get("torch_dist_version"):
        out["torch"]["version"] = env_info["torch_dist_version"]
    ctx = Context(args, env_info, torch_info)
    out["arch"] = cc_text(ctx.cc) if ctx.cc else None
    out["arch_source"] = ctx.arch_source
    out["gpu"] = bool(args.get("gpu"))
    with ThreadPoolExecutor(max_workers=max(1, ctx.jobs)) as pool:
        for name in packages:
            info = env_info["packages"].get(name) or {"installed": False}
            if not info.get("installed"):
                out["packages"][name] = {
                    "installed": False,
                    "version": None,
                    "requires_torch": None,
                    "provenance": None,
                    "built_for": None,
                    "torch": None,
                    "checks": [],
                    "extensions": [],
                }
                continue
            out["packages"][name] = probe_package(ctx, name, info, pool)
    return out


def main(argv: list[str]) -> int:
    """Entry point: argv[1] is the JSON arguments; prints one JSON document."""
    try:
        args = json.loads(argv[1]) if len(argv) > 1 else {}
        if not isinstance(args, dict):
            raise ValueError("arguments must be a JSON object")
        parse_cc(args.get("arch"))
        if not isinstance(args.get("packages", []), list):
            raise ValueError("'packages' must be a list of distribution names")
    except ValueError as e:
        print(json.dumps({"probe_version": PROBE_VERSION, "error": f"bad arguments: {e}"}))
        return 2
    result = probe(args)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
