"""Library search the way ld.so does it: ld.so.conf and its includes, RPATH/RUNPATH with
``$ORIGIN``, the default directories; the NEEDED closure of a shared object.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import glob
import os
import re

from sm120kit.remote.lib.elf import Elf, open_elf


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
