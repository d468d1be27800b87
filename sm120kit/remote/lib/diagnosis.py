"""Why an extension does not load: its missing libraries, symbol versions and symbols sorted
into causes (CUDA major drift, torch ABI drift, a CPU torch, ...), one line each.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8.
"""

from __future__ import annotations

import os
import re
from typing import Any

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
    """'torch 2.9.1 (recipe pin for pkg 0.3.21)', or None when nothing says."""
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
