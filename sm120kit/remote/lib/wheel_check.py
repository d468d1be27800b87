"""Whether a released wheel serves a GPU on a driver, read from the wheel file itself.

A release is trusted only after three things are read from its bytes, never from its name or
its index page: the file's sha256 equals the pin; the CUDA runtime each extension module links
(``NEEDED libcudart.so.N``) is one the target driver runs; and each module the package's loader
picks for the GPU's compute capability holds SASS for it, or PTX the driver can JIT. Modules a
recipe declares as not for the arch (FA3's ``flash_ops``, FlashMLA) are reported, not judged.

The arch judgment is smoke's (``cudaarch.arch_verdict`` over the fatbin targets
``fatbin.elf_targets`` reads), so a wheel verified here and the same wheel smoke-checked after
install get the same verdict. CUDA's rules applied: a module built by CUDA X.Y runs on a
driver for CUDA X.Z with Z < Y through minor-version compatibility only from SASS (PTX a newer
toolkit wrote cannot be JIT-compiled by the older driver), and never on a driver of an older
major.

Part of the hosts' library (`sm120kit.remote.lib`): stdlib only, Python >= 3.8, so the same
check runs on the controller (once per wheel, before a fleet downloads it) and on a host.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from typing import Any

from sm120kit.remote.lib.cudaarch import arch_verdict, cc_text
from sm120kit.remote.lib.elf import Elf, ElfError
from sm120kit.remote.lib.fatbin import elf_targets
from sm120kit.remote.lib.files import sha256_file

_RELEASE = re.compile(rb"Cuda compilation tools, release (\d+)\.(\d+), V(\d+\.\d+\.\d+)")
_CUDART = re.compile(r"^libcudart\.so\.(\d+)$")


def module_key(path: str) -> str:
    """A module's path in the wheel without its suffixes (``torchao/_C``,
    ``nvidia/cu13/lib/libcufft``): how `not_for_arch` names one where stems repeat. A dot in a
    directory name (``scipy.libs/``) is kept."""
    head, _, name = path.rpartition("/")
    stem = name.split(".", 1)[0]
    return f"{head}/{stem}" if head else stem


def read_module(name: str, path: str) -> dict[str, Any]:
    """What one extension module carries: SASS and PTX targets, the CUDA runtime major it
    links, and the nvcc release that compiled it (from the string nvcc embeds, when the
    module holds one uncompressed). `name` is its path inside the wheel."""
    try:
        elf = Elf(path)
    except (ElfError, OSError) as exc:
        return {"module": name, "error": f"not a readable ELF file: {exc}"}
    try:
        sass, ptx, has_fatbin = elf_targets(elf)
        needed = list(elf.dynamic().get("needed") or [])
        found = _RELEASE.search(elf.data)
        release = found.group(3).decode() if found else None  # before the mapping closes
    finally:
        elf.close()
    majors = sorted({int(m.group(1)) for n in needed for m in [_CUDART.match(n)] if m})
    return {
        "module": name,
        "sass": sass,
        "ptx": ptx,
        "has_fatbin": has_fatbin,
        "cudart": majors[0] if majors else None,
        "nvcc": release,
    }


def read_wheel(path: str) -> list[dict[str, Any]]:
    """Every extension module (``*.so``) of the wheel at `path`. Each is copied out to a
    temporary file and memory-mapped (FA3's flash_ops is over 1 GB unpacked). A module whose
    own bytes name no nvcc release takes the one its siblings name: one wheel, one build."""
    out = []
    with zipfile.ZipFile(path) as zf, tempfile.TemporaryDirectory(prefix="wheel-check-") as tmp:
        for info in zf.infolist():
            if not (info.filename.endswith(".so") or ".so." in info.filename):
                continue
            copy = os.path.join(tmp, "module.so")
            with zf.open(info) as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            out.append(read_module(info.filename, copy))
            os.unlink(copy)
    return share_nvcc(out)


def share_nvcc(modules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`modules` with the one nvcc release their siblings name given to those that name none
    (one wheel, one build); as they are when the siblings name none or several."""
    releases = sorted({m["nvcc"] for m in modules if m.get("nvcc")})
    if len(releases) == 1:
        for mod in modules:
            if mod.get("nvcc") is None and not mod.get("error"):
                mod["nvcc"] = releases[0]
    return modules


def _major_minor(text: str) -> tuple[int, int]:
    parts = text.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def judge_module(
    mod: dict[str, Any], cc: tuple[int, int], driver: str, driver_cuda: str
) -> dict[str, Any]:
    """One module's verdict on a GPU of capability `cc` behind a driver whose newest CUDA is
    `driver_cuda` ("12.8"): status ``ok`` | ``fail`` with the reason, and notes."""
    notes: list[str] = []
    if mod.get("error"):
        return {**mod, "status": "fail", "reason": mod["error"], "notes": notes}
    drv = _major_minor(driver_cuda)
    major = mod.get("cudart")
    built = _major_minor(mod["nvcc"]) if mod.get("nvcc") else None
    if major is not None and major > drv[0]:
        return {
            **mod,
            "status": "fail",
            "reason": f"links libcudart.so.{major} (CUDA {major}): driver {driver} runs CUDA "
            f"<= {driver_cuda}",
            "notes": notes,
        }
    sass, ptx = list(mod["sass"]), list(mod["ptx"])
    if built is not None and built[0] == drv[0] and built > drv:
        # Minor-version compatibility: the older driver runs the newer minor's SASS, but
        # cannot JIT PTX that a newer toolkit wrote.
        notes.append(
            f"built with CUDA {built[0]}.{built[1]} for a driver of CUDA {driver_cuda}: runs "
            "through CUDA's minor-version compatibility, from SASS only (no PTX JIT)"
        )
        ptx = []
    status, reason = arch_verdict(sass, ptx, cc)
    if status == "warn":
        notes.append(f"{mod['module']}: {reason}")
    # "skip" is a module without device code: nothing of it can miss the arch.
    failed = status == "fail"
    return {
        **mod,
        "status": "fail" if failed else "ok",
        "reason": reason,
        "notes": notes,
        "arch_fail": failed,
    }


def verify_wheel(
    path: str,
    *,
    sha256: str,
    cc: tuple[int, int],
    driver: str,
    driver_cuda: str,
    loaded: list[str],
    not_for_arch: dict[str, str],
    digest: str | None = None,
) -> dict[str, Any]:
    """The verdict on the wheel at `path` for one target.

    `loaded`: the module paths inside the wheel the package's loader uses on `cc` (for
    a loader that picks a per-arch directory, that directory's modules and the shared ones);
    a module of the wheel not listed is reported as not loaded there. `not_for_arch`: module
    stem (or path in the wheel without the suffix) -> why it carries no code for the arch by
    design. `digest`: the file's sha256 when
    the caller has just computed it (the file is not read twice). Returns ``{"ok", "sha256",
    "modules": [...], "refusal": one line or None, "notes": [...]}``.
    """
    got = digest or sha256_file(path)
    if got != sha256:
        return {
            "ok": False,
            "sha256": got,
            "modules": [],
            "refusal": f"sha256 {got} differs from the lock's {sha256}",
            "notes": [],
        }
    return judge_wheel(
        read_wheel(path),
        sha256=got,
        cc=cc,
        driver=driver,
        driver_cuda=driver_cuda,
        loaded=loaded,
        not_for_arch=not_for_arch,
    )


def judge_wheel(
    modules: list[dict[str, Any]],
    *,
    sha256: str,
    cc: tuple[int, int],
    driver: str,
    driver_cuda: str,
    loaded: list[str],
    not_for_arch: dict[str, str],
) -> dict[str, Any]:
    """The verdict on one wheel of sha256 `sha256` whose extension modules are `modules`
    (`read_wheel`'s rows, read from the file now or, with the same reader, when the lock's
    catalogue was drafted from this very file): `verify_wheel`'s result."""
    judged: list[dict[str, Any]] = []
    notes: list[str] = []
    for mod in modules:
        # A module is named by its stem (``flash_ops``) or, where stems repeat across
        # packages, by its path in the wheel without the suffix (``torchao/_C``).
        stem = mod["module"].rsplit("/", 1)[-1].split(".", 1)[0]
        qualified = module_key(mod["module"])
        why = not_for_arch.get(qualified, not_for_arch.get(stem))
        if why is not None:
            judged.append({**mod, "status": "not for arch", "reason": why})
            continue
        if mod["module"] not in loaded:
            judged.append({**mod, "status": "not loaded", "reason": f"not loaded on {cc_text(cc)}"})
            continue
        verdict = judge_module(mod, cc, driver, driver_cuda)
        judged.append(verdict)
        notes += [n for n in verdict["notes"] if n not in notes]
    by_module = {j["module"]: j for j in judged}
    refusal = None
    for name in loaded:  # the loader's own order: the module a user meets first is named
        entry = by_module.get(name)
        if entry is None:
            refusal = f"{name}: not in the wheel, but the loader picks it on {cc_text(cc)}"
        elif entry["status"] == "fail" and entry.get("arch_fail"):
            found = ", ".join(entry.get("sass", []) + entry.get("ptx", [])) or "none"
            refusal = f"{name}: {entry['reason']} (device code: {found}; wanted: {cc_text(cc)})"
        elif entry["status"] == "fail":
            refusal = f"{name}: {entry['reason']}"
        if refusal:
            break
    return {
        "ok": refusal is None,
        "sha256": sha256,
        "modules": judged,
        "refusal": refusal,
        "notes": notes,
    }


_VARIANT_DIR = re.compile(r"(?:^|/)sm(\d+)/")
_CPYTHON = re.compile(r"\.cpython-(\d+)-")


def loaded_modules(
    names: list[str], cc: tuple[int, int], python: str, variants: dict[str, str] | None = None
) -> list[str]:
    """The modules of `names` a process of Python `python` ("3.11") loads on capability `cc`:
    a module tagged for another CPython cannot be imported, and of a loader's per-arch
    directories (``smNN/``) only the one it picks is loaded, as `variants` says (capability
    ``"9.0"`` -> directory, ``"*"`` for any other; recipe data, read from the package's own
    loader). Every other shared object counts as loaded."""
    want = "".join(python.split(".")[:2])
    pick = None
    if variants:
        pick = variants.get(cc_text(cc), variants.get("*"))
    out = []
    for name in names:
        tag = _CPYTHON.search(name)
        if tag and tag.group(1) != want:
            continue
        variant = _VARIANT_DIR.search(name)
        if variant and pick is not None and "sm" + variant.group(1) != pick:
            continue
        out.append(name)
    return out


def shared_objects(path: str) -> list[str]:
    """The shared objects (``*.so``, ``*.so.N``) inside the wheel at `path`."""
    with zipfile.ZipFile(path) as zf:
        return [n for n in zf.namelist() if n.endswith(".so") or ".so." in n]


def verify_locked_wheel(
    path: str,
    *,
    sha256: str,
    cc: tuple[int, int],
    driver: str,
    driver_cuda: str,
    python: str,
    not_for_arch: dict[str, str],
    variants: dict[str, str] | None = None,
) -> dict[str, Any]:
    """`verify_wheel` with the loaded modules found by rule (`loaded_modules`): what a lock's
    compiled release gets before it is installed, on the controller or on the host."""
    got = sha256_file(path)
    loaded = loaded_modules(shared_objects(path), cc, python, variants) if got == sha256 else []
    return verify_wheel(
        path,
        sha256=sha256,
        cc=cc,
        driver=driver,
        driver_cuda=driver_cuda,
        loaded=loaded,
        not_for_arch=not_for_arch,
        digest=got,
    )
