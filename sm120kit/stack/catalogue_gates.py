"""Arch gates a package writes in its own source (docs/catalogue.md "Arch gates"): the checks
that admit only some GPUs on a code path, read from the wheel's files so that a verdict about
a path quotes the package's own words, never a table typed by hand.

Readers, each for one shape of gate, general over packages that write it:

- ``check``: a C/C++ ``*CHECK(<condition>, "Unsupported architecture")`` whose condition
  compares the SM version with constants (``mSM == kSM_100``, ``== 103``); flashinfer's
  trtllm-gen FMHA runner (``include/flashinfer/trtllm/fmha/fmhaRunner.cuh``);
- ``dispatch``: a C/C++ ``bool is...Compatible(int smVersion, ...)`` whose body admits
  ``smVersion == N`` only: the cubins a runner will dispatch to (flashinfer's trtllm-gen
  GEMM and batched-GEMM runners, ``csrc/trtllm_*gemm_runner.cu`` ``isArchCompatible``);
- ``nvcc_majors``: a Python function that builds a JIT module with
  ``get_nvcc_flags_list(supported_major_versions=[...])`` (flashinfer's ``jit/``; on a GPU of
  another major it raises "No supported CUDA architectures found");
- ``raise_unless``: a Python ``if not (... is_smNNN ...): raise ...("... --flag ...")``, a
  refusal naming the flag it is about (sglang's ``--fp8-gemm-backend=flashinfer_trtllm``);
- ``kernel_sources``: JIT kernel sources named per arch, ``smNNN_*.cuh`` / ``.cu`` in one
  directory (sgl-deep-gemm's ``deep_gemm/include/deep_gemm/impls/``): which archs the package
  has kernels for at all. Vendored CUTLASS/CuTe/CCCL headers are not the package's own.
"""

from __future__ import annotations

import ast
import posixpath
import re
import zipfile
from collections.abc import Iterable

from .catalogue import ArchGate

MESSAGE = b"Unsupported architecture"
_CPP = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".cxx")
_CHECK = re.compile(r"\b\w*CHECK\w*\s*\(")
_KSM = re.compile(r"\bkSM_(\d{2,3})\b")
_EQ_NUM = re.compile(r"==\s*(\d{2,3})\b")
_CLASS = re.compile(r"\b(?:class|struct)\s+(\w+)\s*(?::[^;{]*)?\{")
_COMPAT = re.compile(r"\bbool\s+(is\w*Compatible)\s*\(\s*int\s+(\w+)")
_KERNEL_SRC = re.compile(r"^sm(\d{2,3})[a-z]?_\w+\.(?:cuh|cu)$")
_VENDORED = ("/cutlass/", "/cute/", "/cccl/", "/cub/", "/thrust/")
_IS_SM = re.compile(r"^_?is_((?:sm\d{2,3}_?(?:or_)?)+)")
_SM_NUM = re.compile(r"sm(\d{2,3})")
_FLAG = re.compile(r"--[a-z][\w-]*(?:=[\w.-]+)?")


def _cap(sm: str) -> str:
    """``"100"`` -> ``"10.0"``, ``"90"`` -> ``"9.0"``."""
    n = int(sm)
    return f"{n // 10}.{n % 10}"


def _cap_key(cap: str) -> tuple[int, int]:
    major, _, minor = cap.partition(".")
    return int(major), -1 if minor == "x" else int(minor)


def _sorted(caps: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(caps), key=_cap_key))


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _one_line(text: str, limit: int = 240) -> str:
    out = " ".join(text.split())
    return out if len(out) <= limit else out[: limit - 3] + "..."


def cpp_gates(path: str, text: str) -> list[ArchGate]:
    """The ``check`` and ``dispatch`` gates of one C/C++ file."""
    out = []
    start = 0
    while True:
        pos = text.find(MESSAGE.decode(), start)
        if pos < 0:
            break
        start = pos + 1
        calls = [m for m in _CHECK.finditer(text, max(0, pos - 600), pos)]
        if not calls:
            continue
        call = calls[-1]
        cond = text[call.end() : pos]
        caps = [_cap(n) for n in _KSM.findall(cond)] or [_cap(n) for n in _EQ_NUM.findall(cond)]
        if not caps:
            continue
        owners = list(_CLASS.finditer(text, 0, call.start()))
        symbol = owners[-1].group(1) if owners else posixpath.basename(path)
        end = text.find(")", pos)
        line = _line(text, call.start())
        out.append(
            ArchGate(
                name=f"{path}:{symbol}",
                kind="check",
                archs=_sorted(caps),
                source=f"{path}:{line} {symbol}",
                text=_one_line(text[call.start() : end + 1 if end > 0 else pos]),
            )
        )
    for m in _COMPAT.finditer(text):
        body_end = text.find("\n}", m.end())
        body = text[m.end() : body_end if body_end > 0 else len(text)]
        var = re.escape(m.group(2))
        caps = [_cap(n) for n in re.findall(rf"\b{var}\s*==\s*(\d{{2,3}})\b", body)]
        if not caps:
            continue
        line = _line(text, m.start())
        out.append(
            ArchGate(
                name=f"{path}:{m.group(1)}",
                kind="dispatch",
                archs=_sorted(caps),
                source=f"{path}:{line} {m.group(1)}",
                text=f"{m.group(1)}(int {m.group(2)}, ...) admits {m.group(2)} == "
                + ", ".join(sorted({c.replace(".", "") for c in caps}, key=int)),
            )
        )
    return out


def _ints(node: ast.expr) -> list[int] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(
        isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts
    ):
        return [int(e.value) for e in node.elts]  # type: ignore[attr-defined]
    return None


def _message(node: ast.Raise) -> str:
    """The string parts of a raise's first argument (f-string literals included)."""
    exc = node.exc
    if not isinstance(exc, ast.Call) or not exc.args:
        return ""
    parts = []
    for sub in ast.walk(exc.args[0]):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            parts.append(sub.value)
    return "".join(parts)


def _sm_names(test: ast.expr) -> list[str]:
    """The capabilities of the ``is_smNNN`` names a negated test asks (``not is_sm100``)."""
    negated = any(isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not) for n in ast.walk(test))
    if not negated:
        return []
    caps = []
    for n in ast.walk(test):
        name = n.attr if isinstance(n, ast.Attribute) else n.id if isinstance(n, ast.Name) else ""
        m = _IS_SM.match(name)
        if m:
            caps += [f"{int(s) // 10}.x" for s in _SM_NUM.findall(m.group(1))]
    return caps


def python_gates(path: str, data: bytes) -> list[ArchGate]:
    """The ``nvcc_majors`` and ``raise_unless`` gates of one Python file."""
    if b"supported_major_versions" not in data and b"is_sm" not in data:
        return []
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return []
    out: dict[str, ArchGate] = {}
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        majors: list[int] = []
        first = 0
        for node in ast.walk(func):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    got = _ints(kw.value) if kw.arg == "supported_major_versions" else None
                    if got:
                        majors += got
                        first = first or node.lineno
            if isinstance(node, ast.If):
                caps = _sm_names(node.test)
                raises = [r for s in node.body for r in ast.walk(s) if isinstance(r, ast.Raise)]
                msg = _message(raises[0]) if caps and raises else ""
                flag = _FLAG.search(msg)
                if flag:
                    name = f"{path}:{func.name}:{flag.group(0)}"
                    out.setdefault(
                        name,
                        ArchGate(
                            name=name,
                            kind="raise_unless",
                            archs=_sorted(caps),
                            source=f"{path}:{node.lineno} {func.name}",
                            text=_one_line(msg),
                        ),
                    )
        if majors:
            # Several calls in one function (per build variant): the union, the gate that
            # admits the most.
            name = f"{path}:{func.name}"
            listed = sorted(set(majors))
            out.setdefault(
                name,
                ArchGate(
                    name=name,
                    kind="nvcc_majors",
                    archs=tuple(f"{m}.x" for m in listed),
                    source=f"{path}:{first} {func.name}",
                    text=f"get_nvcc_flags_list(supported_major_versions={listed})",
                ),
            )
    return list(out.values())


def kernel_source_gates(names: Iterable[str]) -> list[ArchGate]:
    """One ``kernel_sources`` gate per directory holding ``smNNN_*.cuh`` files of its own."""
    groups: dict[str, dict[str, int]] = {}
    for name in names:
        if any(v in "/" + name for v in _VENDORED):
            continue
        m = _KERNEL_SRC.match(posixpath.basename(name))
        if m:
            per = groups.setdefault(posixpath.dirname(name), {})
            cap = _cap(m.group(1))
            per[cap] = per.get(cap, 0) + 1
    out = []
    for folder, per in sorted(groups.items()):
        caps = _sorted(per)
        counts = ", ".join(f"sm{c.replace('.', '')}_* {per[c]}" for c in caps)
        out.append(
            ArchGate(
                name=f"{folder}:sm*_*",
                kind="kernel_sources",
                archs=caps,
                source=f"{folder}/sm*_*",
                text=f"per-arch kernel sources: {counts}",
            )
        )
    return out


def arch_gates(
    zf: zipfile.ZipFile, dist: str, version: str, targets: tuple[str, ...]
) -> tuple[ArchGate, ...]:
    """Every arch gate of the wheel, each with why it refuses each target arch it refuses."""
    found: list[ArchGate] = []
    names = zf.namelist()
    for name in sorted(names):
        if ".dist-info/" in name:
            continue
        if name.endswith(".py"):
            found += python_gates(name, zf.read(name))
        elif name.endswith(_CPP) and not any(v in "/" + name for v in _VENDORED):
            data = zf.read(name)
            if MESSAGE in data or b"Compatible" in data:
                found += cpp_gates(name, data.decode("utf-8", "replace"))
    found += kernel_source_gates(names)
    out = []
    for gate in found:
        not_on = {
            arch: f"{dist} {version} {gate.source}: {gate.text}: admits "
            f"{', '.join(gate.archs)} only, not {arch}"
            for arch in targets
            if not gate.admits(arch)
        }
        out.append(ArchGate(gate.name, gate.kind, gate.archs, gate.source, gate.text, not_on))
    return tuple(out)
