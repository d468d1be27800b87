"""Build minikernel: one CUDA kernel compiled by nvcc, linked into a torch C++ extension.

Why not `CUDAExtension`: with a CPU-only torch, torch.utils.cpp_extension never finds a CUDA
toolkit (CUDA_HOME is None whatever the environment says), so the .cu files are compiled
here with nvcc directly and the objects linked into a `CppExtension`. That works with a CPU
torch and with a CUDA torch alike.

Knobs (environment):

- ``TORCH_CUDA_ARCH_LIST``: archs, translated as cpp_extension does (``12.0`` ->
  ``arch=compute_120,code=sm_120``; ``+PTX`` adds ``code=compute_120``; ``12.0a`` ->
  ``sm_120a``). Default ``12.0``.
- ``CUDA_HOME`` / ``CUDA_PATH``: the toolkit; else ``nvcc`` on PATH; else ``/usr/local/cuda``.
- ``MAX_JOBS``: parallel nvcc processes.
- ``MINIKERNEL_CUDART``: ``static`` (default), ``shared`` or ``none``. Static cudart makes the
  wheel independent of where (and whether) a toolkit is installed on the host that runs it:
  only the driver (libcuda.so.1, loaded by cudart at run time) is needed. ``shared`` links
  ``-lcudart`` with an RPATH to the build toolkit's lib dir. ``none`` (also
  ``MINIKERNEL_NO_CUDART=1``) deliberately leaves cudart out: importing then fails with an
  undefined ``__cudaRegisterFatBinary`` -- a broken variant for smoke tests.
- ``MINIKERNEL_NO_TORCH_RPATH=1``: no RPATH into torch/lib, so loading ``_C`` before torch
  fails with ``libc10.so: cannot open shared object file`` (like sgl-kernel's .so files).

Progress lines are printed ninja-style (``[n/N] nvcc ...``) for sm120kit's build monitor.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = Path(__file__).resolve().parent
CU_SOURCES = ["csrc/add_one.cu", "csrc/device_info.cu"]
VERSION = "0.1.0"
_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def fail(message: str) -> NoReturn:
    print(f"minikernel: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def gencode_flags(arch_list: str) -> list[str]:
    """TORCH_CUDA_ARCH_LIST -> nvcc -gencode flags, the way cpp_extension translates it."""
    flags: list[str] = []
    for entry in re.split(r"[;,\s]+", arch_list.strip()):
        if not entry:
            continue
        match = _ARCH.match(entry)
        if not match:
            fail(f"TORCH_CUDA_ARCH_LIST entry '{entry}' is not like 12.0, 12.0a or 12.0+PTX")
        num = f"{match[1]}{match[2]}{match[3]}"
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if match[4]:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    if not flags:
        fail("TORCH_CUDA_ARCH_LIST is empty")
    return flags


def cuda_home() -> Path:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            home = Path(os.environ[var])
            if not (home / "bin" / "nvcc").exists():
                fail(f"Failed to find nvcc: {var}={home} has no bin/nvcc")
            return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return Path(nvcc).resolve().parent.parent
    default = Path("/usr/local/cuda")
    if (default / "bin" / "nvcc").exists():
        return default
    fail("Failed to find nvcc: set CUDA_HOME to a CUDA toolkit (>= 12.8 for sm_120)")


def cuda_lib_dirs(home: Path) -> list[str]:
    candidates = [
        home / "lib64",
        home / "lib",
        home / "targets" / "x86_64-linux" / "lib",
        home / "targets" / "sbsa-linux" / "lib",
    ]
    return [str(p) for p in candidates if p.is_dir()]


def nvcc_version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release (\d+\.\d+), V([\d.]+)", out)
    return match[2] if match else "unknown"


def compile_cu(nvcc: Path, sources: list[str], out_dir: Path, flags: list[str]) -> list[str]:
    """nvcc -c each .cu in parallel (MAX_JOBS); returns the object paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1)
    total = len(sources)
    done = 0

    def one(src: str) -> str:
        obj = out_dir / (Path(src).stem + ".o")
        cmd = [
            str(nvcc),
            "-c",
            str(HERE / src),
            "-o",
            str(obj),
            "-O3",
            "-std=c++17",
            "-Xcompiler",
            "-fPIC",
            f"-I{HERE / 'csrc'}",
            *flags,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        nonlocal done
        done += 1
        print(f"[{done}/{total}] {' '.join(cmd)}", flush=True)
        if proc.stdout or proc.stderr:
            print(proc.stdout + proc.stderr, end="", flush=True)
        if proc.returncode != 0:
            fail(f"nvcc failed on {src} (exit {proc.returncode})")
        return str(obj)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, sources))


class BuildWithNvcc(BuildExtension):
    """Compiles the .cu files with nvcc first, then lets torch build the C++ extension."""

    def build_extensions(self) -> None:
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
        if not arch_list:
            arch_list = "12.0"
            print("minikernel: TORCH_CUDA_ARCH_LIST not set, building for 12.0", flush=True)
        flags = gencode_flags(arch_list)
        home = cuda_home()
        nvcc = home / "bin" / "nvcc"
        cudart = os.environ.get("MINIKERNEL_CUDART", "static")
        if os.environ.get("MINIKERNEL_NO_CUDART") == "1":
            cudart = "none"
        if cudart not in ("static", "shared", "none"):
            fail(f"MINIKERNEL_CUDART={cudart!r}: use static, shared or none")
        build_temp = Path(self.build_temp)
        objects = compile_cu(nvcc, CU_SOURCES, build_temp / "nvcc", flags)
        info = build_temp / "gen"
        info.mkdir(parents=True, exist_ok=True)
        values = {
            "MINIKERNEL_ARCH_LIST": ";".join(e for e in re.split(r"[;,\s]+", arch_list) if e),
            "MINIKERNEL_GENCODE_FLAGS": " ".join(flags),
            "MINIKERNEL_NVCC_VERSION": nvcc_version(nvcc),
            "MINIKERNEL_TORCH_VERSION": torch.__version__,
            "MINIKERNEL_CUDART": cudart,
        }
        (info / "minikernel_build_info.h").write_text(
            "#pragma once\n" + "".join(f"#define {k} {json.dumps(v)}\n" for k, v in values.items())
        )
        torch_lib = Path(torch.__file__).resolve().parent / "lib"
        for ext in self.extensions:
            ext.include_dirs.append(str(info))
            ext.extra_objects.extend(objects)
            lib_dirs = cuda_lib_dirs(home)
            if cudart == "static":
                ext.library_dirs.extend(lib_dirs)
                ext.libraries.extend(["cudart_static", "rt", "pthread", "dl"])
            elif cudart == "shared":
                ext.library_dirs.extend(lib_dirs)
                ext.libraries.append("cudart")
                ext.extra_link_args.extend(f"-Wl,-rpath,{d}" for d in lib_dirs)
            if os.environ.get("MINIKERNEL_NO_TORCH_RPATH") != "1":
                # $ORIGIN first: torch beside minikernel in the same site-packages; then the
                # build env's torch, which is the env sm120kit installs the wheel into.
                ext.extra_link_args.extend(
                    ["-Wl,-rpath,$ORIGIN/../torch/lib", f"-Wl,-rpath,{torch_lib}"]
                )
        print(
            f"minikernel: archs {values['MINIKERNEL_ARCH_LIST']}, nvcc "
            f"{values['MINIKERNEL_NVCC_VERSION']} ({home}), cudart {cudart}, "
            f"torch {torch.__version__}",
            flush=True,
        )
        super().build_extensions()


# Pinned like sgl-kernel pins its torch: the extension uses torch's C++ ABI, which only the
# version it was compiled against is guaranteed to have (local label such as +cpu dropped,
# `==` then matches any local build of that version).
TORCH_PIN = f"torch=={torch.__version__.split('+')[0]}"

setup(
    name="minikernel",
    version=VERSION,
    description="One CUDA kernel as a torch extension: sm120kit's toolchain probe",
    packages=["minikernel"],
    ext_modules=[
        CppExtension("minikernel._C", ["csrc/ext.cpp"], include_dirs=[str(HERE / "csrc")])
    ],
    cmdclass={"build_ext": BuildWithNvcc.with_options(use_ninja=False)},
    install_requires=[TORCH_PIN],
    python_requires=">=3.9",
    zip_safe=False,
)
