"""Build multikernel: eight .cu units compiled by nvcc, linked into one Python extension.

The sample for the compile cache (docs/compile-cache.md): several units of a few seconds of
nvcc each, so that a rebuild after a change to one unit shows what a per-unit cache saves.
It takes its nvcc command the way torch's cpp_extension does (``PYTORCH_NVCC``, split like a
shell word list, else ``$CUDA_HOME/bin/nvcc``), so a cache in front of nvcc is wired exactly
as for flash-attn; it needs no torch, so it builds on a CPU-only box.

Knobs (environment): ``TORCH_CUDA_ARCH_LIST`` (``12.0`` -> ``sm_120``, ``12.0a`` ->
``sm_120a``, ``+PTX`` adds PTX; default ``12.0a``), ``MAX_JOBS`` (parallel nvcc processes),
``NVCC_THREADS`` (nvcc ``--threads``, default 1), ``CUDA_HOME``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# abspath, not realpath: like torch's cpp_extension, the path the build was started in is
# the one nvcc sees.
HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = [f"csrc/unit{i}.cu" for i in range(8)]
_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def fail(message: str) -> None:
    print(f"multikernel: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def gencode_flags(arch_list: str) -> list[str]:
    flags: list[str] = []
    for entry in re.split(r"[;,\s]+", arch_list.strip()):
        if not entry:
            continue
        match = _ARCH.match(entry)
        if not match:
            fail(f"TORCH_CUDA_ARCH_LIST entry '{entry}' is not like 12.0, 12.0a or 12.0+PTX")
        num = f"{match[1]}{match[2]}{match[3]}"
        flags += ["-gencode", f"arch=compute_{num},code=sm_{num}"]
        if match[4]:
            flags += ["-gencode", f"arch=compute_{num},code=compute_{num}"]
    return flags


def cuda_home() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return home
    nvcc = shutil.which("nvcc")
    if nvcc:
        return os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return "/usr/local/cuda"


def nvcc_command() -> list[str]:
    """torch.utils.cpp_extension's rule: PYTORCH_NVCC verbatim, else CUDA_HOME's nvcc."""
    if os.environ.get("PYTORCH_NVCC"):
        return shlex.split(os.environ["PYTORCH_NVCC"])
    return [os.path.join(cuda_home(), "bin", "nvcc")]


class BuildUnits(build_ext):
    """nvcc -c every unit (MAX_JOBS at once), then link them into the extension."""

    def build_extensions(self) -> None:
        flags = gencode_flags(os.environ.get("TORCH_CUDA_ARCH_LIST") or "12.0a")
        threads = os.environ.get("NVCC_THREADS") or "1"
        out = os.path.join(os.path.abspath(self.build_temp), "nvcc")
        os.makedirs(out, exist_ok=True)
        nvcc = nvcc_command()
        total, done = len(UNITS), 0

        def one(src: str) -> str:
            nonlocal done
            obj = os.path.join(out, os.path.basename(src)[:-3] + ".o")
            cmd = [
                *nvcc,
                "-c",
                os.path.join(HERE, src),
                "-o",
                obj,
                "-O3",
                "-std=c++17",
                "--threads",
                threads,
                "-Xcompiler",
                "-fPIC",
                f"-I{os.path.join(HERE, 'csrc')}",
                *flags,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            done += 1
            print(f"[{done}/{total}] {' '.join(cmd)}", flush=True)
            if proc.stdout or proc.stderr:
                print(proc.stdout + proc.stderr, end="", flush=True)
            if proc.returncode != 0:
                fail(f"nvcc failed on {src} (exit {proc.returncode})")
            return obj

        jobs = max(1, int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            objects = list(pool.map(one, UNITS))
        home = cuda_home()
        libs = [
            d for d in (os.path.join(home, "lib64"), os.path.join(home, "lib")) if os.path.isdir(d)
        ]
        for ext in self.extensions:
            ext.extra_objects.extend(objects)
            ext.library_dirs.extend(libs)
            ext.libraries.extend(["cudart_static", "rt", "pthread", "dl", "stdc++"])
        super().build_extensions()


setup(
    name="multikernel",
    version="0.1.0",
    description="Eight CUDA units behind one extension: sm120kit's compile-cache sample",
    packages=["multikernel"],
    ext_modules=[Extension("multikernel._C", ["csrc/module.c"], include_dirs=["csrc"])],
    cmdclass={"build_ext": BuildUnits},
    python_requires=">=3.9",
    zip_safe=False,
)
