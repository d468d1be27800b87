"""Real released wheels from PyPI, kept in one test cache directory (``SM120KIT_TEST_CACHE``,
default ``~/.cache/sm120kit-tests``, under ``wheels/``) and shared by the tests that read them.

`MANIFEST` names every real wheel the suite reads: its file name, its PyPI URL and its sha256
(read from the shipped locks, locks/*/pylock.*.toml, which name the same files).
``python -m tests.support.real_wheels`` (run once by scripts/test.sh) fills the cache and
verifies every file by sha256; a test then reads the verified file. A file missing when a test
asks for it is downloaded then (and verified); a download that fails fails the test, saying why.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import NamedTuple

import pytest

from sm120kit.remote.lib.files import sha256_file
from tests.support.sample_wheel import cache_root
from tests.support.venvs import make_venv


class ManifestEntry(NamedTuple):
    """One real wheel: its file name, where PyPI serves it, and its sha256."""

    filename: str
    url: str
    sha256: str


#: Every real wheel the suite reads (file name, URL and sha256 as in the shipped locks).
MANIFEST: tuple[ManifestEntry, ...] = (
    ManifestEntry(
        "sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "https://files.pythonhosted.org/packages/57/dd/0206d00b2ea5b163bbdd216e91cc4f23ea90fde8620db0a6272d4236b68e/sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",
        "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937",
    ),
    ManifestEntry(
        "sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl",
        "https://files.pythonhosted.org/packages/a6/d4/51fca556d2103305a9d570a44c5cead617b7dc1dea6ca897e3fcc3515f95/sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl",
        "043cbe4a10e7887ea1b25599b729ff1ce115a0d5217b2c177aff9f9ae5327724",
    ),
    ManifestEntry(
        "flashinfer_python-0.7.2-py3-none-any.whl",
        "https://files.pythonhosted.org/packages/04/7c/6d46e4f529186472929c4b05d006a39ef14649dcf7c8d5c98eed59a27f1d/flashinfer_python-0.7.2-py3-none-any.whl",
        "770550a0aa92b2f10e6c9a1f048dd43713f0f3bb6a12710186fcf8e4e9c99bd8",
    ),
    ManifestEntry(
        "sgl_flash_mla-1.0.0-cp310-abi3-manylinux2014_x86_64.whl",
        "https://files.pythonhosted.org/packages/a9/f1/f349cde7a0ed3a1ce36f82c9caad3ea5321cd300b61e3971021569058d54/sgl_flash_mla-1.0.0-cp310-abi3-manylinux2014_x86_64.whl",
        "95d2761376337af4568dbadedc1807b0d90e4d8383c63fa859518a34937392b3",
    ),
    ManifestEntry(
        "flash_attn_4-4.0.0b36-py3-none-any.whl",
        "https://files.pythonhosted.org/packages/82/6d/0550c426ceba8c68f75b80ed8a5075502ab349f1c3458b51bc37a6bac504/flash_attn_4-4.0.0b36-py3-none-any.whl",
        "b6f0e2a264334cb1b59289ddd309c7c76d3a8d184268316b43403e51ba8795d2",
    ),
    ManifestEntry(
        "quack_kernels-0.6.5-py3-none-any.whl",
        "https://files.pythonhosted.org/packages/73/d8/f5e56c38b286308d115a171e3c5c44f24e9d03980c3cfd22588df40261fa/quack_kernels-0.6.5-py3-none-any.whl",
        "df1ddd31366c82eb9692fe087c671209189dcbde53c909c81a865d4ee66b158d",
    ),
    ManifestEntry(
        "humming_kernels-0.1.12-py3-none-manylinux_2_28_x86_64.whl",
        "https://files.pythonhosted.org/packages/ec/a2/f96912ee7d68f56e61c15555657ffa057b8afbaa21241c63342b5969bb74/humming_kernels-0.1.12-py3-none-manylinux_2_28_x86_64.whl",
        "cd3ef712a93f3a9075ea99de2c72bcd3ec89dab3759b3a248d869f5507b60331",
    ),
    ManifestEntry(
        "sgl_deep_gemm-0.2.3.post2-py3-none-manylinux2014_x86_64.whl",
        "https://files.pythonhosted.org/packages/9c/6c/a77fddc1c22ddd5d41aca2ebe016e0a6b3a6ca14b9ccdb4c0d03a634b3ba/sgl_deep_gemm-0.2.3.post2-py3-none-manylinux2014_x86_64.whl",
        "d1e3e1421d6624a16f32f2dee35c026d64d2f77799e5c0c5eaba68c27023630c",
    ),
    ManifestEntry(
        "sgl_deep_ep-0.1.2.post1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "https://files.pythonhosted.org/packages/72/94/e73568a31f901099f7fbec80c8c248cf360029525036155e6e68b5f5e9b0/sgl_deep_ep-0.1.2.post1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "fb8f222a7a1c18289dec23a51d4c041c659eaa7612df086585c7db6e19b00bee",
    ),
    ManifestEntry(
        "nvidia_cuda_nvcc-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "https://files.pythonhosted.org/packages/0b/7d/21c734e63423dc53fb1b1ebbb6dee84e9ccafbeeaa30e9ae07e6fdcdd15b/nvidia_cuda_nvcc-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "f5c4f7ead5d964fb4af42bbf1e6d3ec3c1e6e9d83b53749f691d387e7fcaa3a7",
    ),
    ManifestEntry(
        "nvidia_cuda_crt-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "https://files.pythonhosted.org/packages/d5/ac/fb3ca43f437405ce33bfd8ba64503148fdc9198265f26f8ecd1bd6e76338/nvidia_cuda_crt-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "e898b7f73d3035fa89915a3f7bf3b54a73e90249746111aed295822c4729bb29",
    ),
    ManifestEntry(
        "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "https://files.pythonhosted.org/packages/2e/24/d1558f3b68b1d26e706813b1d10aa1d785e4698c425af8db8edc3dced472/nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
    ),
    ManifestEntry(
        "nvidia_cuda_cccl-13.3.5.0.6-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "https://files.pythonhosted.org/packages/a7/7e/4aa67cca14e0558b5a151a692f5ffe609930cdfc20d16c7a584de68424d4/nvidia_cuda_cccl-13.3.5.0.6-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        "d5230098fa2df5021e1a00c0c4eee41797671a91119d31e892463e5ccf3ee326",
    ),
    ManifestEntry(
        "sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl",
        "https://files.pythonhosted.org/packages/36/9f/f836e126002c7cfcfe35418f6cff5a63fe3f529c609b334ca4775354b4d5/sgl_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl",
        "57dfb3a2a3cd759f499c32e2bad5f6489b7c58f7f9a84ee00c53ec92d303aaab",
    ),
)
BY_NAME = {e.filename: e for e in MANIFEST}


class WheelUnavailable(Exception):
    """A manifest wheel that cannot be downloaded or does not hash to its sha256."""


def wheels_dir() -> Path:
    """The one directory the real wheels are kept in."""
    return cache_root() / "wheels"


def _verified(path: Path, sha256: str) -> bool:
    """Whether `path` hashes to `sha256`. The hash is remembered beside the file (with its size
    and mtime), so a file verified once (by the fill) is not read again while unchanged."""
    if not path.exists():
        return False
    st = path.stat()
    stamp = Path(str(path) + ".sha256")
    want = f"{sha256} {st.st_size} {st.st_mtime_ns}"
    if stamp.exists() and stamp.read_text().strip() == want:
        return True
    if sha256_file(str(path)) != sha256:
        return False
    stamp.write_text(want + "\n")
    return True


def ensure(entry: ManifestEntry) -> Path:
    """The manifest wheel `entry` in the cache, verified by sha256; downloaded when absent or
    wrong. Raises WheelUnavailable."""
    wheels = wheels_dir()
    wheels.mkdir(parents=True, exist_ok=True)
    path = wheels / entry.filename
    with open(wheels / f".{entry.filename}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _verified(path, entry.sha256):
            return path
        part = path.with_name(path.name + ".part")
        try:
            with urllib.request.urlopen(entry.url, timeout=60) as resp, open(part, "wb") as out:
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise WheelUnavailable(f"cannot download {entry.url}: {exc}") from None
        got = sha256_file(str(part))
        if got != entry.sha256:
            part.unlink()
            raise WheelUnavailable(f"{entry.url}: sha256 {got}, the manifest says {entry.sha256}")
        os.replace(part, path)
        if not _verified(path, entry.sha256):
            raise WheelUnavailable(f"{path}: changed while it was verified")
        return path


def real_wheel(project: str, version: str, filename: str) -> Path:
    """The PyPI wheel `filename` of `project`==`version`, from the verified cache. A wheel
    outside `MANIFEST` fails the test: add it there (with its URL and sha256) first."""
    entry = BY_NAME.get(filename)
    if entry is None:
        pytest.fail(f"{project}=={version} ({filename}) is not in tests/support/real_wheels.py")
    try:
        return ensure(entry)
    except WheelUnavailable as exc:
        pytest.fail(str(exc))


def fill() -> int:
    """Fill the cache with every manifest wheel and verify each by sha256 (scripts/test.sh)."""
    bad = 0
    for entry in MANIFEST:
        try:
            path = ensure(entry)
        except WheelUnavailable as exc:
            print(f"real wheels: {exc}", file=sys.stderr)
            bad += 1
            continue
        print(f"real wheels: {path.name} sha256 ok", file=sys.stderr)
    return 1 if bad else 0


def wheel_venv(label: str, wheels: list[Path], *, system_site_packages: bool) -> Path:
    """A venv under the test cache holding `wheels` installed with --no-deps, built once per
    set of wheel hashes (and interpreter) under a lock shared by concurrent sessions. With
    `system_site_packages` it sees the suite's torch (2.13.0+cpu), never installing into it."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{label}-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shas = [sha256_file(w) for w in wheels]
        key = shas[0] if len(shas) == 1 else hashlib.sha256("".join(shas).encode()).hexdigest()
        venv = root / f"venv-{label}-{key[:12]}"
        marker = venv / ".sm120kit-test.json"
        want: dict[str, object] = {"python": sys.executable}
        want.update({"wheel_sha256": shas[0]} if len(shas) == 1 else {"wheels": shas})
        if marker.exists() and json.loads(marker.read_text()) == want:
            return venv
        subprocess.run(["rm", "-rf", str(venv)], check=True)
        make_venv(venv, system_site_packages=system_site_packages)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
            + ["-q", "--no-deps", "--no-index", "--no-compile", *map(str, wheels)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"installing {len(wheels)} wheel(s) into {venv}: {proc.stderr.strip()[-500:]}"
            )
        marker.write_text(json.dumps(want))
        return venv


if __name__ == "__main__":
    sys.exit(fill())
