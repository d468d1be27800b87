"""flash-attn 2.8.3.post2 against torch 2.14's headers: the C++ standard patch, on the real files.

Nothing here is simulated:

- the PyPI sdists of flash-attn 2.8.3.post2 (and 2.8.3), fetched and sha256-checked by the
  tool's own ``remote/fetch_source.py``, kept in the test cache (``SM120KIT_TEST_CACHE``);
- the tool's patch machinery (``patching.check_and_apply`` over a local connection, the same
  ``remote/patch_tree.py`` a build host runs);
- torch 2.14.1's headers and its ``torch/utils/cpp_extension.py``, unpacked from the real
  torch 2.14.1 wheel (``pip download --no-deps``; only those files are unpacked, cached);
- a real g++ run over flash-attn's ``csrc/flash_attn/flash_api.cpp``, the host-compiled file of
  ``flash_attn_2_cuda``, which includes torch (``torch/python.h``, ATen, ``c10/cuda``) as every
  unit of the extension does. ``-fsyntax-only``: the failure is in the front end, and the
  check stays well under a minute.

The host-compiler flags are read from the setup.py itself (its ``compiler_c17_flag`` list,
the ``cxx`` arguments of the extension), then completed the way torch's BuildExtension
completes them (``-std=c++20`` only when no ``-std`` is given, as the unpacked
cpp_extension.py shows), so the test compiles with what a real build would pass.
"""

from __future__ import annotations

import ast
import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sm120kit.builds.patching import ALREADY_APPLIED, APPLIES, check_and_apply, load_patch, select
from sm120kit.errors import PatchError
from sm120kit.remote import fetch_source
from tests.support.sample_wheel import cache_root, local_context

REPO = Path(__file__).resolve().parents[2]
PATCH = REPO / "patches" / "flash-attn" / "0001-cxx-standard-from-torch.patch"
SDISTS = {
    "2.8.3.post2": "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b",
    "2.8.3": "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d",
}
TORCH = "2.14.1"
CXX20_ERROR = "C++20 or later compatible compiler is required"


# ----------------------------------------------------------------------------- fixtures


def _sdist_tree(version: str) -> Path:
    root = cache_root() / "flash-attn"
    root.mkdir(parents=True, exist_ok=True)
    dest = root / f"flash-attn-{version}"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        doc = fetch_source.fetch(
            {
                "kind": "sdist",
                "package": "flash-attn",
                "version": version,
                "sha256": SDISTS[version],
                "dest": str(dest),
                "cache_dir": str(root / "downloads"),
            }
        )
    assert doc.get("ok"), f"cannot fetch flash-attn {version} from PyPI: {doc.get('error')}"
    return dest


@pytest.fixture(scope="session")
def post2_tree() -> Path:
    return _sdist_tree("2.8.3.post2")


@pytest.fixture(scope="session")
def torch214() -> Path:
    """torch 2.14.1's include/ and cpp_extension.py, unpacked from the real wheel."""
    root = cache_root() / f"torch-{TORCH}-headers"
    done = root / ".complete"
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".torch-{TORCH}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            wheels = root / "wheel"
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
                + ["--python-version", "3.11", f"torch=={TORCH}", "-d", str(wheels)],
                capture_output=True,
                text=True,
            )
            found = sorted(wheels.glob(f"torch-{TORCH}-*.whl"))
            assert found, f"cannot download torch {TORCH}: {proc.stderr[-2000:]}"
            with zipfile.ZipFile(found[0]) as zf:
                for name in zf.namelist():
                    if name.startswith("torch/include/") or name == (
                        "torch/utils/cpp_extension.py"
                    ):
                        zf.extract(name, root)
            shutil.rmtree(wheels)  # 550 MB; the headers are what the tests read
            done.write_text("ok\n")
    return root / "torch"


def _patched_copy(tree: Path, dest: Path) -> Path:
    """A copy of the files the patch touches (setup.py alone: copying the whole sdist, cutlass
    included, costs more than the checks), patched by the tool."""
    patch = load_patch(PATCH)
    assert patch.files == ["setup.py"]
    dest.mkdir()
    shutil.copy2(tree / "setup.py", dest / "setup.py")
    report = check_and_apply(local_context(), str(dest), [patch])
    assert report.applied and report.state(PATCH.name) == APPLIES
    return dest


# ----------------------------------------------------------------------------- setup.py flags


def _list_assigned(setup_py: Path, name: str) -> list[str]:
    """The first list literal assigned to `name` anywhere in setup.py."""
    for node in ast.walk(ast.parse(setup_py.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list)
            return [str(v) for v in value]
    raise AssertionError(f"{setup_py}: no assignment to {name}")


def _with_torch_standard(flags: list[str]) -> list[str]:
    """What torch 2.14's BuildExtension makes of an extension's cxx flags on Linux."""
    return flags if any(f.startswith("-std=") for f in flags) else [*flags, "-std=c++20"]


def _compile_flash_api(
    tree: Path, torch_dir: Path, cxx_flags: list[str]
) -> subprocess.CompletedProcess[str]:
    """g++ over the sdist's flash_api.cpp with the include paths setup.py gives it."""
    cuda_include = _cuda_include()
    src = tree / "csrc" / "flash_attn"
    cmd = [
        "g++",
        "-fsyntax-only",
        "-w",
        *cxx_flags,
        "-D_GNU_SOURCE",
        "-DNDEBUG",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda",
        f"-I{src}",
        f"-I{src / 'src'}",
        f"-I{tree / 'csrc' / 'cutlass' / 'include'}",
        f"-I{torch_dir / 'include'}",
        f"-I{torch_dir / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-I{cuda_include}",
        f"-I{sysconfig.get_paths()['include']}",
        str(src / "flash_api.cpp"),
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


def _cuda_include() -> Path:
    """The CUDA headers beside the nvcc the suite uses (c10/cuda includes cuda_runtime_api.h)."""
    nvcc = os.environ.get("SM120KIT_NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    real = Path(nvcc).resolve()
    for candidate in (real.parent.parent / "include", Path("/usr/local/cuda/include")):
        if (candidate / "cuda_runtime_api.h").is_file():
            return candidate
    # /usr/local/bin/nvcc may be a wrapper script: ask nvcc where its toolkit lives.
    out = subprocess.run([nvcc, "--dryrun", "--version"], capture_output=True, text=True)
    for line in (out.stdout + out.stderr).splitlines():
        if "TOP=" in line:
            top = Path(line.split("TOP=", 1)[1].strip())
            if (top / "include" / "cuda_runtime_api.h").is_file():
                return top / "include"
    pytest.fail(f"no CUDA headers found beside {nvcc}")


# ----------------------------------------------------------------------------- tests


def test_patch_header_gates_on_torch_and_release() -> None:
    patch = load_patch(PATCH)
    assert str(patch.applies_to) == "<=2.8.3.post2,>=2.8.3"
    assert str(patch.torch) == ">=2.14"
    assert patch.fixes.startswith("torch 2.14's headers need C++20")
    assert "a8aa52b1ab3e9ca574c8a33b3f35afc017ffa2e2" in patch.header["Upstream"]
    for torch in ("2.14.1", "2.14.1+cu130", "2.15.0"):
        chosen, skipped = select([patch], "2.8.3.post2", torch=torch)
        assert (chosen, skipped) == ([patch], [])
    chosen, skipped = select([patch], "2.8.3.post2", torch="2.9.1")
    assert chosen == []
    assert skipped == [(patch, "torch 2.9.1 is outside Applies-To-Torch >=2.14")]
    chosen, skipped = select([patch], "2.8.4", torch="2.14.1")
    assert chosen == [] and "version 2.8.4 is outside" in skipped[0][1]


def test_torch_adds_cxx20_only_where_no_standard_is_given(torch214: Path) -> None:
    """The premise of the patch, read in torch 2.14.1's own cpp_extension.py: BuildExtension
    appends ``-std=c++20`` to an extension's cxx and nvcc flags only when they name no
    ``-std``, so flash-attn's own -std=c++17 wins unless it is removed."""
    text = (torch214 / "utils" / "cpp_extension.py").read_text(encoding="utf-8")
    assert "def append_std17_if_no_std_present(cflags)" in text
    assert "cpp_flag = cpp_flag_prefix + 'c++20'" in text
    assert "if not any(flag.startswith(cpp_flag_prefix) for flag in cflags):" in text
    assert "append_std17_if_no_std_present(cuda_post_cflags)" in text


def test_setup_py_flags_before_and_after(post2_tree: Path, tmp_path: Path) -> None:
    before = post2_tree / "setup.py"
    assert "-std=c++17" in _list_assigned(before, "nvcc_flags")
    assert _list_assigned(before, "compiler_c17_flag") == ["-O3", "-std=c++17"]
    after = _patched_copy(post2_tree, tmp_path / "tree") / "setup.py"
    assert not [f for f in _list_assigned(after, "nvcc_flags") if f.startswith("-std=")]
    assert _list_assigned(after, "compiler_c17_flag") == ["-O3"]
    # Nothing else in setup.py changed: two lines gone, one edited.
    old, new = before.read_text().splitlines(), after.read_text().splitlines()
    assert len(old) - len(new) == 1
    assert [ln for ln in old if ln not in new] == [
        '    "-std=c++17",',
        '    compiler_c17_flag=["-O3", "-std=c++17"]',
    ]


def test_patch_is_detected_as_applied_and_refused_where_it_does_not_fit(
    post2_tree: Path, tmp_path: Path
) -> None:
    patch = load_patch(PATCH)
    tree = _patched_copy(post2_tree, tmp_path / "patched")
    again = check_and_apply(local_context(), str(tree), [patch], apply=False)
    assert again.state(PATCH.name) == ALREADY_APPLIED
    other = tmp_path / "other"
    other.mkdir()
    setup = other / "setup.py"
    shutil.copy2(post2_tree / "setup.py", setup)
    setup.write_text(
        setup.read_text().replace(
            'compiler_c17_flag=["-O3", "-std=c++17"]', 'compiler_c17_flag=["-O2"]'
        )
    )
    before = setup.read_text()
    with pytest.raises(PatchError) as err:
        check_and_apply(local_context(), str(other), [patch])
    first = str(err.value).splitlines()[0]
    assert first.startswith(f"patch {PATCH.name} does not apply to setup.py in {other} on ")
    assert first.endswith("(tree left unchanged)")
    assert setup.read_text() == before


def test_patch_fits_2_8_3_too(tmp_path: Path) -> None:
    """Applies-To starts at 2.8.3: its setup.py has the same lines (it differs from post2's
    in get_wheel_url only)."""
    _patched_copy(_sdist_tree("2.8.3"), tmp_path / "tree")


def test_flash_api_compiles_against_torch_2_14_only_when_patched(
    post2_tree: Path, torch214: Path, tmp_path: Path
) -> None:
    unpatched = _with_torch_standard(_list_assigned(post2_tree / "setup.py", "compiler_c17_flag"))
    assert "-std=c++17" in unpatched
    proc = _compile_flash_api(post2_tree, torch214, unpatched)
    assert proc.returncode != 0
    assert CXX20_ERROR in proc.stderr

    # The patch touches setup.py only, so the sdist's sources compile under the patched flags.
    setup = _patched_copy(post2_tree, tmp_path / "tree") / "setup.py"
    patched = _with_torch_standard(_list_assigned(setup, "compiler_c17_flag"))
    assert patched == ["-O3", "-std=c++20"]
    proc = _compile_flash_api(post2_tree, torch214, patched)
    assert proc.returncode == 0, proc.stderr[-3000:]
