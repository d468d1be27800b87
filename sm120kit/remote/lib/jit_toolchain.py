"""Which CUDA compiler and headers each JIT package of a Python env would use, and whether they
are one toolkit that can target the GPU.

Packages such as flashinfer compile their kernels on the host at run time, with whatever nvcc
and CUDA headers their own lookup finds. CCCL's ``cuda/std/__cccl/cuda_toolkit.h`` (in the
CUDA 13.0 toolkit, nvidia-cuda-cccl 13.x and flashinfer 0.7.2's vendored CCCL 3.6) stops every
CUDA compile whose compiler major.minor differs from ``CUDART_VERSION`` of the
``cuda_runtime_api.h`` on its include path: ``#error "CUDA compiler and CUDA toolkit headers
are incompatible, please check your include paths"``. An env from pip can hold exactly that:
torch 2.14.1's cuda-toolkit 13.0.3 pins nvidia-cuda-runtime 13.0.96 (the headers), while
humming-kernels[cu13] requires nvidia-cuda-nvcc unpinned (13.5.37, into the same
``site-packages/nvidia/cu13``).

The lookup rules, each read from the package's released source:

- ``flashinfer`` (flashinfer-python 0.7.2, ``flashinfer/jit/cpp_ext.py``): ``get_cuda_path()``
  takes ``$CUDA_HOME``, else ``$CUDA_PATH``, else the directory above the ``bin/`` of ``which
  nvcc``, else ``/usr/local/cuda``; ``generate_ninja_build_for_op()`` runs
  ``$FLASHINFER_NVCC`` or ``<home>/bin/nvcc`` with ``-isystem <home>/include`` (dropped when
  home is ``/usr``) after its vendored CCCL (``-I flashinfer/data/cccl/...``, ``jit/env.py``
  ``CCCL_INCLUDE_DIRS``). ``flashinfer/compilation_context.py`` ``_normalize_cuda_arch()``:
  capability 12.0 gets ``compute_120f`` with CUDA >= 12.9, ``compute_120a`` with 12.8, and
  "SM 120 requires CUDA >= 12.8" below; 12.1 and up need 12.9.
- ``humming`` (humming-kernels 0.1.12, ``humming/utils/cuda.py``): ``find_all_cuda_paths()``
  lists ``/usr/local/cuda``, ``/usr/local/cuda-*`` (sorted) and ``$CUDA_HOME`` (version from
  ``version.json``, ``version.txt``, ``nvcc -V`` on PATH, or the directory name), then per
  ``sys.path`` entry ``nvidia/`` (CUDA 12 wheels) and ``nvidia/cu13`` (CUDA 13 wheels, minor
  unknown); ``filter_cuda_paths()`` keeps those of ``torch.version.cuda``'s major, known minor
  first and highest first; nvcc is the first with ``bin/nvcc``, the headers the first with
  ``include/cuda_runtime.h`` (its ``include`` and ``include/cccl``: ``humming/jit/compiler.py``);
  ``humming/jit/runtime.py`` ``_get_compiler()``: ``$HUMMING_COMPILER``, else NVRTC when
  ``cuda.bindings`` imports, else nvcc.
- ``deep-gemm`` (sgl-deep-gemm 0.2.3.post2, ``deep_gemm/cuda_helpers.py``
  ``find_cuda_home()``, the same first three steps as flashinfer's, then ``/usr/local/cuda``):
  ``deep_gemm/__init__.py`` passes that home to its C++ JIT (``_C.init``), which runs
  ``<home>/bin/nvcc``; headers ``<home>/include`` (and ``include/cccl``:
  ``deep_gemm/build_ext.py``).
- ``tilelang`` (tilelang 0.1.12, ``tilelang/env.py`` ``_find_cuda_home()``): ``$CUDA_HOME``,
  else ``$CUDA_PATH``, else the directory above the ``bin/`` of ``which nvcc`` (two above when
  that path names ``hpc_sdk`` and not ``cuda``), else the directory above the ``bin/`` of the
  ``nvcc`` file of the ``nvidia-cuda-nvcc`` distribution (it fails to import when that
  distribution has none), else ``/usr/local/cuda``, else ``/opt/nvidia/hpc_sdk/Linux_x86_64``;
  a home that does not exist counts as none. ``tilelang/contrib/nvcc.py``
  ``get_nvcc_compiler()`` runs ``<home>/bin/nvcc`` with ``-I<home>/include``.
- ``cute-dsl`` (the packages that compile through nvidia-cutlass-dsl, CuTe DSL, and its own
  compiler libraries; which ones, and the files read, in ``sm120kit/packages/stack.py``): no
  nvcc, CUDA_HOME or CUDA header lookup is in their sources; a system ptxas runs only when
  ``CUTE_DSL_PTXAS_PATH`` is set.
- ``triton`` (triton 3.8.0, ``triton/backends/nvidia/compiler.py`` ``get_ptxas()``):
  ``ptxas-blackwell`` for capability >= 10.0, else ``ptxas``; ``triton/knobs.py``
  ``env_nvidia_tool``: ``$TRITON_PTXAS_BLACKWELL_PATH`` / ``$TRITON_PTXAS_PATH``, else (also
  when that one does not run) the wheel's own ``triton/backends/nvidia/bin/<tool>``. No nvcc
  or CUDA headers (vLLM's engine table, ``sm120kit/engines.py``, names it).

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8. The probe runs
it in its own process, whose environment (PATH, CUDA_HOME, ...) is the one the target
interpreter gets.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
from typing import Any, Callable, NamedTuple

from sm120kit.remote.lib.names import CUDA_VERSION_JSON, dist_stem

_NVCC_RELEASE = re.compile(r"release (\d+)\.(\d+), V(\d+\.\d+\.\d+)")
_CUDART = re.compile(r"#define\s+CUDART_VERSION\s+(\d+)")
_CCCL = re.compile(r"#define\s+CCCL_VERSION\s+(\d+)")

#: The oldest nvcc that emits code for a capability, and flashinfer's target for it
#: (flashinfer/compilation_context.py `_normalize_cuda_arch`).
_MIN_NVCC = {(12, 0): (12, 8), (12, 1): (12, 9)}


class Where(NamedTuple):
    """What every package's rule reads: the environment the target interpreter gets, its
    ``sys.path``, the package's install location, the GPU's capability and torch's CUDA."""

    env: dict[str, str]
    sys_path: list[str]
    location: str
    cc: tuple[int, int] | None
    torch_cuda: str | None


def _mm(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def cannot_target(version: str | None, cc: tuple[int, int] | None) -> str | None:
    """``cannot target 12.0: needs CUDA >= 12.8`` when a compiler (nvcc or ptxas) of release
    `version` is older than capability `cc` needs; None when it can or nothing is known."""
    need = _MIN_NVCC.get(cc) if cc is not None else None
    have = _mm(version)
    if cc is None or need is None or have is None or have >= need:
        return None
    return f"cannot target {cc[0]}.{cc[1]}: needs CUDA >= {need[0]}.{need[1]}"


def nvcc_version(path: str | None, timeout: float = 60) -> tuple[str | None, str | None]:
    """(``13.5.37``, None) from ``nvcc --version``, or (None, why not)."""
    if not path:
        return None, "no nvcc"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None, f"no nvcc at {path}"
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{path} --version: {exc}"
    m = _NVCC_RELEASE.search(proc.stdout)
    if not m:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"{path} --version: {tail[0]}"
    return m.group(3), None


def headers_version(include: str | None) -> str | None:
    """``13.0`` from ``CUDART_VERSION`` in ``<include>/cuda_runtime_api.h`` (None: none there)."""
    if not include:
        return None
    try:
        with open(os.path.join(include, "cuda_runtime_api.h"), errors="replace") as fh:
            m = _CUDART.search(fh.read())
    except OSError:
        return None
    if not m:
        return None
    value = int(m.group(1))
    return f"{value // 1000}.{(value % 1000) // 10}"


def cccl_version(include: str | None) -> str | None:
    """``3.6.0`` from ``CCCL_VERSION`` under a CCCL include root (``cuda/std/__cccl``)."""
    if not include:
        return None
    try:
        with open(os.path.join(include, "cuda", "std", "__cccl", "version.h")) as fh:
            m = _CCCL.search(fh.read())
    except OSError:
        return None
    if not m:
        return None
    v = int(m.group(1))
    return f"{v // 1000000}.{(v // 1000) % 1000}.{v % 1000}"


def _dist_info(sys_path: list[str], name: str) -> tuple[str, str] | None:
    """(the sys.path entry, the .dist-info directory) of distribution `name`, or None."""
    stem = dist_stem(name)
    for entry in sys_path:
        for info in sorted(glob.glob(os.path.join(entry, "*.dist-info"))):
            dist = os.path.basename(info)[: -len(".dist-info")].partition("-")[0]
            if dist_stem(dist) == stem:
                return entry, info
    return None


def dist_version(sys_path: list[str], name: str) -> str | None:
    """The version of distribution `name` installed on `sys_path` (its .dist-info name)."""
    found = _dist_info(sys_path, name)
    if found is None:
        return None
    return os.path.basename(found[1])[: -len(".dist-info")].partition("-")[2]


def judge_pair(
    nvcc: str | None,
    nvcc_ver: str | None,
    include: str | None,
    hdr_ver: str | None,
    cc: tuple[int, int] | None,
) -> tuple[str, str]:
    """(status, reason) for an nvcc and the headers it compiles against, for capability `cc`."""
    if nvcc_ver is None:
        return (
            "fail",
            f"no working nvcc ({nvcc or 'none found'}): the kernels it compiles at run time cannot be built",
        )
    if hdr_ver is None:
        return "fail", f"no CUDA headers (cuda_runtime_api.h) at {include or 'any include path'}"
    nv = _mm(nvcc_ver)
    if nv is not None and nv != _mm(hdr_ver):
        return "fail", (
            f"CUDA compiler and CUDA toolkit headers are incompatible: nvcc {nvcc_ver} ({nvcc}) "
            f"with CUDA {hdr_ver} headers ({include}/cuda_runtime_api.h); CCCL's "
            "cuda/std/__cccl/cuda_toolkit.h stops every compile with that #error"
        )
    too_old = cannot_target(nvcc_ver, cc)
    if too_old:
        return "fail", f"nvcc {nvcc_ver} {too_old}"
    return "pass", f"nvcc {nvcc_ver} with CUDA {hdr_ver} headers: one toolkit"


def _cuda_home(env: dict[str, str]) -> tuple[str, str]:
    """(CUDA home, how it was found) by the lookup flashinfer's ``get_cuda_path()`` and
    deep_gemm's ``find_cuda_home()`` share (torch's ``cpp_extension`` rule)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            return env[var], f"${var}"
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        return os.path.dirname(os.path.dirname(found)), f"which nvcc ({found})"
    return "/usr/local/cuda", "default /usr/local/cuda (no nvcc on PATH)"


def _flashinfer(w: Where) -> dict[str, Any]:
    home, how = _cuda_home(w.env)
    nvcc = w.env.get("FLASHINFER_NVCC") or os.path.join(home, "bin", "nvcc")
    include = None if home == "/usr" else os.path.join(home, "include")
    vendored = os.path.join(w.location, "flashinfer", "data", "cccl", "libcudacxx", "include")
    ver, err = nvcc_version(nvcc)
    hdr = headers_version(include)
    status, reason = judge_pair(nvcc, ver, include, hdr, w.cc)
    reason += f" (CUDA home {home}, from {how})"
    target = None
    mm = _mm(ver)
    if w.cc == (12, 0) and mm is not None:
        target = "compute_120f" if mm >= (12, 9) else "compute_120a" if mm >= (12, 8) else None
    return {
        "cuda_home": home,
        "cuda_home_from": how,
        "nvcc": nvcc,
        "nvcc_from": "$FLASHINFER_NVCC" if w.env.get("FLASHINFER_NVCC") else "<cuda_home>/bin/nvcc",
        "nvcc_version": ver,
        "nvcc_error": err,
        "headers": include,
        "headers_version": hdr,
        "cccl": vendored if os.path.isdir(vendored) else None,
        "cccl_version": cccl_version(vendored),
        "target": target,
        "status": status,
        "reason": reason,
        "source": "flashinfer/jit/cpp_ext.py get_cuda_path(), generate_ninja_build_for_op(); "
        "flashinfer/compilation_context.py _normalize_cuda_arch()",
    }


def _humming_system_version(path: str, env: dict[str, str]) -> tuple[int, int] | None:
    try:
        with open(os.path.join(path, CUDA_VERSION_JSON)) as fh:
            v = _mm((json.load(fh).get("cuda") or {}).get("version"))
        if v:
            return v
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(os.path.join(path, "version.txt")) as fh:
            m = re.search(r"(\d+)\.(\d+)", fh.read())
        if m:
            return int(m.group(1)), int(m.group(2))
    except OSError:
        pass
    if os.path.exists(os.path.join(path, "bin", "nvcc")):
        # humming runs plain "nvcc -V" here: the one on PATH, not this directory's.
        ver, _ = nvcc_version(shutil.which("nvcc", path=env.get("PATH")))
        if _mm(ver):
            return _mm(ver)
    m = re.match(r"cuda-(\d+)(?:\.(\d+))?$", os.path.basename(os.path.realpath(path)))
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def _humming_candidates(env: dict[str, str], sys_path: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    paths = ["/usr/local/cuda"] + sorted(glob.glob("/usr/local/cuda-*"))
    if "CUDA_HOME" in env:
        paths.append(env["CUDA_HOME"])
    for path in paths:
        if not os.path.isdir(path) or os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        v = _humming_system_version(path, env)
        out.append({"source": "system", "path": path, "major": v[0] if v else None,
                    "minor": v[1] if v else None})  # fmt: skip
    roots: set[str] = set()
    for entry in sys_path:
        root = os.path.join(entry, "nvidia")
        if not os.path.isdir(root) or root in roots:
            continue
        roots.add(root)
        if any(os.path.isdir(os.path.join(root, s)) for s in ("cuda_runtime", "cuda_nvcc")):
            out.append({"source": "pypi", "path": root, "major": 12, "minor": None})
        cu13 = os.path.join(root, "cu13")
        if os.path.isdir(os.path.join(cu13, "include")):
            out.append({"source": "pypi", "path": cu13, "major": 13, "minor": None})
    return out


def _humming_includes(c: dict[str, Any]) -> list[str]:
    dirs = [os.path.join(c["path"], "include")]
    if c["source"] == "pypi" and c["major"] == 12:
        dirs += [os.path.join(c["path"], n, "include") for n in sorted(os.listdir(c["path"]))]
    return [d for d in dirs if os.path.isdir(d)]


def _humming_nvcc(c: dict[str, Any]) -> str | None:
    for rel in ("bin/nvcc", "cuda_nvcc/bin/nvcc"):
        path = os.path.join(c["path"], rel)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _humming(w: Where) -> dict[str, Any]:
    major = (_mm(w.torch_cuda) or (None, None))[0]
    source = "humming/utils/cuda.py find_all_cuda_paths(), filter_cuda_paths(); humming/jit/compiler.py; humming/jit/runtime.py _get_compiler()"
    base: dict[str, Any] = {"source": source, "torch_cuda": w.torch_cuda}
    if major is None:
        return dict(base, status="fail", reason=(
            "torch has no CUDA (torch.version.cuda is None): humming looks for a toolkit of "
            "torch's CUDA major and finds none"))  # fmt: skip
    cands = [c for c in _humming_candidates(w.env, w.sys_path) if c["major"] == major]
    cands.sort(key=lambda c: (c["minor"] is None, -(c["minor"] or 0)))
    with_nvcc = [c for c in cands if _humming_nvcc(c)]
    with_hdr = [c for c in cands if any(os.path.exists(os.path.join(d, "cuda_runtime.h")) for d in _humming_includes(c))]  # fmt: skip
    compiler = (w.env.get("HUMMING_COMPILER") or "").lower()
    if compiler not in ("nvcc", "nvrtc"):
        bindings = any(glob.glob(os.path.join(p, "cuda", "bindings", "nvrtc*")) for p in w.sys_path)
        compiler = "nvrtc" if bindings else "nvcc"
    hdr_env = with_hdr[0] if with_hdr else None
    include = _humming_includes(hdr_env)[0] if hdr_env else None
    out = dict(base, compiler=compiler, candidates=cands, headers=include,
               headers_version=headers_version(include),
               cccl_version=cccl_version(os.path.join(include, "cccl")) if include else None)  # fmt: skip
    if compiler == "nvrtc":
        # NVRTC and the headers come from one environment (humming/utils/nvrtc.py).
        nvrtc = (
            dist_version(w.sys_path, "nvidia-cuda-nvrtc")
            if hdr_env and hdr_env["source"] == "pypi"
            else None
        )
        out.update(nvrtc_version=nvrtc, status="pass", reason=(
            "NVRTC (cuda.bindings present) with the headers and libnvrtc of one environment "
            f"({hdr_env['path'] if hdr_env else 'none'})"))  # fmt: skip
        if hdr_env is None:
            out.update(status="fail", reason=f"no CUDA {major} environment with cuda_runtime.h")
        elif nvrtc and out["headers_version"] and _mm(nvrtc) != _mm(out["headers_version"]):
            out.update(status="fail", reason=(
                f"CUDA compiler and CUDA toolkit headers are incompatible: NVRTC {nvrtc} with "
                f"CUDA {out['headers_version']} headers ({include}/cuda_runtime_api.h)"))  # fmt: skip
        return out
    nvcc = _humming_nvcc(with_nvcc[0]) if with_nvcc else None
    ver, err = nvcc_version(nvcc)
    status, reason = judge_pair(nvcc, ver, include, out["headers_version"], w.cc)
    out.update(nvcc=nvcc, nvcc_version=ver, nvcc_error=err, status=status, reason=reason)
    return out


def _cute_dsl(w: Where) -> dict[str, Any]:
    dsl = dist_version(w.sys_path, "nvidia-cutlass-dsl")
    out: dict[str, Any] = {
        "compiler": f"nvidia-cutlass-dsl {dsl}" if dsl else None,
        "source": "nvidia-cutlass-dsl compiles; CUTE_DSL_PTXAS_PATH names a system ptxas",
    }
    if not dsl:
        return dict(
            out, status="fail", reason="compiles through nvidia-cutlass-dsl, which is not installed"
        )
    ptxas = w.env.get("CUTE_DSL_PTXAS_PATH")
    if ptxas:
        ver, err = nvcc_version(ptxas)  # ptxas --version prints the same release line
        out.update(ptxas=ptxas, ptxas_version=ver, ptxas_error=err)
        if ver is None or cannot_target(ver, w.cc):
            why = err or f"ptxas {ver} {cannot_target(ver, w.cc)}"
            return dict(out, status="fail", reason=f"CUTE_DSL_PTXAS_PATH={ptxas}: {why}")
    return dict(out, status="pass", reason=f"compiles with nvidia-cutlass-dsl {dsl}'s own compiler: no nvcc or CUDA headers needed")  # fmt: skip


def _home_toolchain(home: str, how: str, cc: tuple[int, int] | None) -> dict[str, Any]:
    """The verdict on ``<home>/bin/nvcc`` with ``<home>/include``: the pair a package runs
    when it takes nvcc and the headers from one CUDA home (deep_gemm, tilelang)."""
    nvcc = os.path.join(home, "bin", "nvcc")
    include = os.path.join(home, "include")
    ver, err = nvcc_version(nvcc)
    hdr = headers_version(include)
    status, reason = judge_pair(nvcc, ver, include, hdr, cc)
    return {
        "cuda_home": home,
        "cuda_home_from": how,
        "nvcc": nvcc,
        "nvcc_version": ver,
        "nvcc_error": err,
        "headers": include,
        "headers_version": hdr,
        "status": status,
        "reason": f"{reason} (CUDA home {home}, from {how})",
    }


def _deep_gemm(w: Where) -> dict[str, Any]:
    home, how = _cuda_home(w.env)
    # deep_gemm/__init__.py hands find_cuda_home() to its C++ JIT (_C.init); the backend runs
    # <home>/bin/nvcc unless its JIT_NVCC_COMPILER setting names another (read from _C.so's
    # strings: the override's exact variable name is compiled in, so it is not followed here).
    return dict(
        _home_toolchain(home, how, w.cc),
        cccl_version=cccl_version(os.path.join(home, "include", "cccl")),
        source="deep_gemm/cuda_helpers.py find_cuda_home(); deep_gemm/__init__.py _C.init; "
        "deep_gemm/build_ext.py include dirs",
    )


def _dist_file(sys_path: list[str], name: str, filename: str) -> tuple[bool, str | None]:
    """(whether distribution `name` is installed on `sys_path`, the path of its first file
    called `filename` per its RECORD, or None)."""
    found = _dist_info(sys_path, name)
    if found is None:
        return False, None
    entry, info = found
    try:
        with open(os.path.join(info, "RECORD")) as fh:
            rows = [line.split(",")[0] for line in fh]
    except OSError:
        return True, None
    path = next((r for r in rows if os.path.basename(r) == filename), None)
    return True, (os.path.normpath(os.path.join(entry, path)) if path else None)


def _tilelang_home(env: dict[str, str], sys_path: list[str]) -> tuple[str | None, str]:
    """(CUDA home or None, how) by tilelang's ``_find_cuda_home()``."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            return env[var], f"${var}"
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        up = 3 if "hpc_sdk" in found.lower() and "cuda" not in found.lower() else 2
        home = found
        for _ in range(up):
            home = os.path.dirname(home)
        how = f"which nvcc ({found})"
    else:
        installed, nvcc = _dist_file(sys_path, "nvidia-cuda-nvcc", "nvcc")
        if installed and nvcc is None:
            return None, "nvidia-cuda-nvcc is installed without an nvcc: tilelang fails to import"
        if nvcc:
            home, how = os.path.dirname(os.path.dirname(nvcc)), f"nvidia-cuda-nvcc's nvcc ({nvcc})"
        elif os.path.exists("/usr/local/cuda"):
            home, how = "/usr/local/cuda", "default /usr/local/cuda"
        elif os.path.exists("/opt/nvidia/hpc_sdk/Linux_x86_64"):
            home, how = "/opt/nvidia/hpc_sdk/Linux_x86_64", "default HPC SDK"
        else:
            return None, "no $CUDA_HOME, nvcc on PATH, nvidia-cuda-nvcc or /usr/local/cuda"
    if not os.path.exists(home):
        return None, f"{home} (from {how}) does not exist"
    return home, how


def _tilelang(w: Where) -> dict[str, Any]:
    home, how = _tilelang_home(w.env, w.sys_path)
    source = (
        "tilelang/env.py _find_cuda_home(); tilelang/contrib/nvcc.py get_nvcc_compiler(), "
        "the -I<home>/include option"
    )
    if home is None:
        return {"cuda_home": None, "cuda_home_from": how, "source": source, "status": "fail",
                "reason": f"no CUDA home: {how}; it cannot compile a kernel"}  # fmt: skip
    return dict(_home_toolchain(home, how, w.cc), source=source)


def _triton(w: Where) -> dict[str, Any]:
    # triton 3.8.0 triton/backends/nvidia/compiler.py get_ptxas(): ptxas-blackwell for
    # capability >= 10.0, else ptxas; triton/knobs.py env_nvidia_tool: $TRITON_<TOOL>_PATH
    # first, then triton/backends/nvidia/bin/<tool> when that one does not run.
    tool = "ptxas-blackwell" if w.cc is not None and w.cc >= (10, 0) else "ptxas"
    var = "TRITON_" + tool.upper().replace("-", "_") + "_PATH"
    bundled = os.path.join(w.location, "triton", "backends", "nvidia", "bin", tool)
    tried = [p for p in (w.env.get(var), bundled) if p]
    out: dict[str, Any] = {"ptxas": None, "ptxas_version": None, "ptxas_from": None,
                           "source": "triton/backends/nvidia/compiler.py get_ptxas(); "
                           "triton/knobs.py env_nvidia_tool"}  # fmt: skip
    errors = []
    for path in tried:
        ver, err = nvcc_version(path)  # ptxas --version prints nvcc's release line
        if ver is not None:
            out.update(ptxas=path, ptxas_version=ver, ptxas_from=f"${var}" if path != bundled
                       else f"triton/backends/nvidia/bin/{tool}")  # fmt: skip
            break
        errors.append(str(err))
    if out["ptxas"] is None:
        return dict(out, status="fail", reason=f"no working {tool}: " + "; ".join(errors))
    too_old = cannot_target(out["ptxas_version"], w.cc)
    if too_old:
        return dict(out, status="fail", reason=f"{tool} {out['ptxas_version']} ({out['ptxas']}) {too_old}")  # fmt: skip
    return dict(out, status="pass", reason=f"{tool} {out['ptxas_version']} from "
                f"{out['ptxas_from']}: compiles its kernels without nvcc or CUDA headers")  # fmt: skip


RULES: dict[str, Callable[[Where], dict[str, Any]]] = {
    "flashinfer": _flashinfer,
    "deep-gemm": _deep_gemm,
    "humming": _humming,
    "cute-dsl": _cute_dsl,
    "tilelang": _tilelang,
    "triton": _triton,
}


def check_jit(
    packages: dict[str, dict[str, Any]],
    sys_path: list[str],
    cc: tuple[int, int] | None,
    torch_cuda: str | None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Per JIT package present (``{name: {"rule", "version", "location", "source"}}``): its toolchain and
    verdict; ``status`` is the worst of them (``skip`` when none is present)."""
    env = dict(os.environ if env is None else env)
    out: dict[str, Any] = {"packages": {}, "status": "skip", "reason": "no JIT package in this env"}
    rank = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}
    for name, pkg in sorted(packages.items()):
        rule = RULES.get(pkg["rule"])
        if rule is None:
            continue
        res = rule(Where(env, sys_path, pkg.get("location") or "", cc, torch_cuda))
        res.update(rule=pkg["rule"], version=pkg.get("version"))
        if pkg.get("source"):  # the package's own files read for its rule (packages/stack.py)
            res["source"] = pkg["source"]
        out["packages"][name] = res
        if rank[res["status"]] > rank[out["status"]]:
            out["status"], out["reason"] = res["status"], f"{name}: {res['reason']}"
    worst = [
        f"{n}: {p['reason']}" for n, p in out["packages"].items() if p["status"] == out["status"]
    ]
    if out["packages"]:
        # Every package at the worst status is named: each may resolve another toolchain.
        out["reason"] = "; ".join(worst)
    return out
