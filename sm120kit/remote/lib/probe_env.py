"""The smoke probe's view of one env: the target interpreter, its torch, the loader's search
rules, and the static (ELF) view of each shared object after ``import torch``.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8. Used by the
probe (`sm120kit/remote/extension_probe.py`) and its checks (`probe_checks.py`).
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Any

from sm120kit.remote.lib.cudaarch import parse_cc
from sm120kit.remote.lib.demangle import Demangler
from sm120kit.remote.lib.diagnosis import close_variant, expected_from
from sm120kit.remote.lib.elf import open_elf
from sm120kit.remote.lib.fatbin import device_targets, relocatable_targets
from sm120kit.remote.lib.loader import Resolver, system_lib_dirs
from sm120kit.remote.lib.names import STACK_RECORD, dist_name
from sm120kit.remote.lib.targets import run_target

PROBE_VERSION = 1
SHLIB_RE = re.compile(r"\.so(\.\d+)*$")
MAX_LISTED_SYMBOLS = 40
#: Read from scanned distributions at most this many missing symbols each (sorting needs all).
MAX_SCANNED_SYMBOLS = 5000
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
        #: The fork servers (`forks.Servers`) checks run in, or None: a fresh interpreter each.
        self.servers: Any = None
        #: The env's install marker (`env_marker`): which wheel each distribution came from.
        self.marker: dict[str, Any] = {}

    def target(
        self, script: str, src: str, args: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Run in-target script `script` (``in_target/<script>.py``, its program `src`) for
        one check: in a child of the fork server whose state it needs, else fresh."""
        if self.servers is None:
            return run_target(self.python, src, args, self.timeout)
        return self.servers.run(script, src, args, self.timeout)  # type: ignore[no-any-return]

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


def env_marker(prefix: str | None) -> dict[str, Any]:
    """``{"path", "mtime", "packages": {name: {"sha256", "version"}}}`` of the env's install
    marker; ``{}`` when the env has none (not installed by the tool from a lock)."""
    if not prefix:
        return {}
    path = os.path.join(prefix, STACK_RECORD)
    try:
        with open(path) as fh:
            doc = json.load(fh)
        mtime = os.stat(path).st_mtime
    except (OSError, ValueError):
        return {}
    packages = doc.get("packages") if isinstance(doc, dict) else None
    if not isinstance(packages, dict):
        return {}
    return {
        "path": path,
        "mtime": mtime,
        "packages": {dist_name(k): v for k, v in packages.items()},
    }


def catalogued(
    marker: dict[str, Any], info: dict[str, Any], facts: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """``{path: {"sass", "ptx", "relocatable", "source"}}``: the files of one distribution whose
    device code the catalogue read from the very wheel installed, so smoke does not read them
    again. A file is trusted when the env's marker says the wheel of sha256 S was installed,
    the catalogue read the wheel of sha256 S (``facts["wheels"]``), the file is a module of it,
    and the file still is what the install recorded: its RECORD row (sha256 and size) is
    there, its size is that size, and it is not newer than the marker. Anything else is read."""
    pkg = (marker.get("packages") or {}).get(dist_name(str(info.get("distribution") or "")))
    sha = pkg.get("sha256") if isinstance(pkg, dict) else None
    wheel = (facts.get("wheels") or {}).get(sha) if sha else None
    if not wheel:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for lib in info.get("libraries") or []:
        mod = (wheel.get("modules") or {}).get(lib["rel"])
        record = lib.get("record") or {}
        if mod is None or not record.get("sha256") or record.get("size") is None:
            continue
        try:
            st = os.stat(lib["path"])
        except OSError:
            continue
        if st.st_size != record["size"] or st.st_mtime > marker["mtime"]:
            continue
        out[lib["path"]] = dict(
            mod, source="{} (wheel sha256 {})".format(wheel.get("source") or "catalogue", sha)
        )
    return out


def static_extension(
    ctx: Context, path: str, known: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Static loader view of one .so after torch: NEEDED, missing libraries, symbols, versions.
    `known`: its device code as the catalogue read it from the installed wheel (`catalogued`),
    taken instead of reading the file's fatbins again."""
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
    if known is not None:
        ext["sass"], ext["ptx"] = list(known["sass"]), list(known["ptx"])
        ext["has_fatbin"] = bool(ext["sass"] or ext["ptx"])
        ext["relocatable"] = list(known.get("relocatable") or [])
        ext["device_code_from"] = known["source"]
    else:
        ext["sass"], ext["ptx"], ext["has_fatbin"] = device_targets(path)
        ext["relocatable"] = relocatable_targets(path)

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
