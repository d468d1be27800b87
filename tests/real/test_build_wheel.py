"""Sources and builds on a host: remote/fetch_source.py and remote/build_wheel.py, run the way
hosts run them (run_script over a LocalConnection), with real pip, real nvcc, real servers."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120kit.builds.knobs import resolve_knobs
from sm120kit.remote import build_wheel, fetch_source, run_script, script_bundle
from tests.support.sample_wheel import (
    SampleWheel,
    build_sample_wheel,
    cuobjdump,
    install_into_venv,
    local_connection,
    nvcc_available,
)

FIXTURES = Path(__file__).parent.parent / "fixtures"
FAKE_FA = FIXTURES / "fake_flash_attn"
REPO = Path(__file__).resolve().parents[2]


def facts(cpus: int, avail_gib: float) -> dict:
    return {"cpu": {"count": cpus}, "memory": {"available_bytes": int(avail_gib * 1024**3)}}


# -- the sample kernel, built for sm_120 with real nvcc ------------------------------------


@pytest.fixture(scope="session")
def sample_wheel() -> SampleWheel:
    """minikernel built once per session (MAX_JOBS=1), cached across sessions by source hash."""
    if not nvcc_available():
        pytest.skip("nvcc not installed")
    return build_sample_wheel()


@pytest.fixture(scope="session")
def sample_venv(sample_wheel: SampleWheel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_into_venv(sample_wheel.wheel, tmp_path_factory.mktemp("venv") / "v")


@pytest.mark.slow
def test_sample_wheel_built(sample_wheel: SampleWheel):
    assert sample_wheel.wheel.name.startswith("minikernel-0.1.0-")
    assert hashlib.sha256(sample_wheel.wheel.read_bytes()).hexdigest() == sample_wheel.sha256
    log = sample_wheel.log.read_text()
    assert "-gencode=arch=compute_120,code=sm_120" in log
    assert "# env TORCH_CUDA_ARCH_LIST=12.0" in log
    # No stray temp dirs or second wheel beside it.
    assert [p.name for p in sample_wheel.wheel.parent.iterdir()] == [sample_wheel.wheel.name]


@pytest.mark.slow
def test_sample_wheel_carries_sm120_sass(sample_wheel: SampleWheel, tmp_path: Path):
    """NVIDIA's cuobjdump (the reference) lists one sm_120 cubin per .cu and no PTX."""
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump (nvidia-cuda-cuobjdump) not installed")
    with zipfile.ZipFile(sample_wheel.wheel) as zf:
        so = next(n for n in zf.namelist() if n.startswith("minikernel/_C") and n.endswith(".so"))
        zf.extract(so, tmp_path)
    out = subprocess.run(
        [str(tool), "--list-elf", str(tmp_path / so)], capture_output=True, text=True, check=True
    ).stdout
    cubins = [line for line in out.splitlines() if line.startswith("ELF file")]
    assert len(cubins) == 2 and all(line.endswith(".sm_120.cubin") for line in cubins), out
    ptx = subprocess.run(
        [str(tool), "--list-ptx", str(tmp_path / so)], capture_output=True, text=True
    )
    assert "No PTX file found" in ptx.stdout + ptx.stderr


@pytest.mark.slow
def test_sample_wheel_pins_the_torch_it_was_built_against(sample_wheel: SampleWheel):
    import torch

    with zipfile.ZipFile(sample_wheel.wheel) as zf:
        meta = zf.read("minikernel-0.1.0.dist-info/METADATA").decode()
    assert f"Requires-Dist: torch=={torch.__version__.split('+')[0]}" in meta.splitlines()


@pytest.mark.slow
def test_sample_wheel_imports_in_a_venv(sample_venv: Path):
    """Installed offline into a venv that sees the system torch (the pin is checked by pip),
    imported, and asked what it is. No GPU exists here: add_one must say so clearly, and
    the statically linked cudart answers with its version and the missing-driver error."""
    probe = """
import json, minikernel, torch
out = {"archs": minikernel.arch_list(), "info": minikernel.build_info(),
       "cuda": minikernel.cuda_runtime_status(), "file": minikernel.__file__}
try:
    minikernel.add_one(torch.ones(4))
except RuntimeError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""
    proc = subprocess.run([str(sample_venv), "-c", probe], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["file"].startswith(str(sample_venv.parent.parent))
    assert doc["archs"] == ["12.0"]
    assert doc["info"]["gencode_flags"] == "-gencode=arch=compute_120,code=sm_120"
    assert doc["info"]["cudart"] == "static"
    assert doc["cuda"]["runtime_version"] >= 12080
    assert doc["cuda"]["device_count"] == 0 and doc["cuda"]["error"]
    assert "minikernel.add_one needs an NVIDIA GPU" in doc["error"]
    assert "built for 12.0" in doc["error"]


@pytest.mark.slow
def test_sample_build_progress_file(sample_wheel: SampleWheel):
    progress = json.loads((sample_wheel.log.parent / "progress.json").read_text())
    assert progress["finished"] is True
    assert progress["total"] == 2 and progress["done"] == 2  # two .cu files, ninja-style lines


# -- builds with a fake flash-attn ----------------------------------------------------------


def _build(tmp_path: Path, src: Path, env: dict[str, str], **extra) -> dict:
    tree = tmp_path / "src"
    if not tree.exists():
        shutil.copytree(src, tree)
    args = {
        "src": str(tree),
        "python": sys.executable,
        "env": env,
        "pip_args": [],
        "out_dir": str(tmp_path / "wheels"),
        "log": str(tmp_path / "logs" / "build.log"),
        "progress": str(tmp_path / "progress.json"),
        "front_end": "pip",
        **extra,
    }
    return run_script(local_connection(), "build_wheel", args)


def _seen(wheel: str) -> dict:
    with zipfile.ZipFile(wheel) as zf:
        return json.loads(zf.read("fake_flash_attn/_build_seen.json"))


def test_fake_flash_attn_sees_the_recipe_knobs(tmp_path: Path):
    """flash-attn's knobs reach its setup.py; TORCH_CUDA_ARCH_LIST (set to something else
    on purpose) changes nothing, as with the real package."""
    knobs = resolve_knobs("flash-attn", "flash-attn", ["12.0"], facts(16, 64), {})
    env = {**knobs.env, "TORCH_CUDA_ARCH_LIST": "7.0"}
    result = _build(tmp_path, FAKE_FA, env)
    assert result["ok"], result.get("log_tail")
    seen = _seen(result["wheel"])
    assert seen["FLASH_ATTN_CUDA_ARCHS"] == "120"
    assert seen["FLASH_ATTENTION_FORCE_BUILD"] == "TRUE"
    assert seen["would_download_prebuilt"] is False
    assert (seen["MAX_JOBS"], seen["NVCC_THREADS"]) == ("7", "4")  # 64 GiB / 9 GB per job
    assert seen["gencode"] == ["-gencode", "arch=compute_120,code=sm_120"]
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert (progress["done"], progress["total"], progress["finished"]) == (3, 3, True)
    assert result["sha256"] == hashlib.sha256(Path(result["wheel"]).read_bytes()).hexdigest()


def test_fake_flash_attn_without_knobs_builds_every_arch(tmp_path: Path):
    """The contrast: without FLASH_ATTN_CUDA_ARCHS / FORCE_BUILD the package builds its
    default four archs and would first try GitHub for a prebuilt wheel."""
    result = _build(tmp_path, FAKE_FA, {})
    seen = _seen(result["wheel"])
    assert seen["gencode"][1:] == [f"arch=compute_{a},code=sm_{a}" for a in (80, 90, 100, 120)]
    assert seen["would_download_prebuilt"] is True


def test_oom_build_is_reported_with_the_setting_to_lower(tmp_path: Path):
    env = {"MAX_JOBS": "8", "NVCC_THREADS": "4", "FAKE_FLASH_ATTN_FAIL": "oom"}
    result = _build(tmp_path, FAKE_FA, env)
    assert result["ok"] is False and result["wheel"] is None
    assert result["failure"]["kind"] == "oom"
    assert "MAX_JOBS=8" in result["failure"]["advice"]
    assert "Killed" in "\n".join(result["log_tail"])
    assert list((tmp_path / "wheels").iterdir()) == []  # no wheel, no temp dir
    assert "died due to signal 9" in Path(result["log"]).read_text()


def test_a_rerun_keeps_the_previous_log(tmp_path: Path):
    """The same build again (same log name, as a retry of one cache key is) moves the failed
    run's log to <log>.1 instead of overwriting it."""
    failed = _build(tmp_path, FAKE_FA, {"MAX_JOBS": "8", "FAKE_FLASH_ATTN_FAIL": "oom"})
    assert failed["ok"] is False
    again = _build(tmp_path, FAKE_FA, {"MAX_JOBS": "8", "FAKE_FLASH_ATTN_FAIL": "oom"})
    assert again["log"] == failed["log"]
    previous = Path(failed["log"] + ".1").read_text()
    assert "died due to signal 9" in previous and previous.startswith("# sm120kit build: ")


def test_interrupted_build_leaves_no_wheel(tmp_path: Path):
    """SIGTERM to the build step (the controller gave up) kills the whole build and leaves
    neither a wheel nor its temp dir."""
    tree = tmp_path / "src"
    shutil.copytree(FAKE_FA, tree)
    args = {
        "src": str(tree),
        "python": sys.executable,
        "env": {"FAKE_FLASH_ATTN_SLEEP": "60"},
        "out_dir": str(tmp_path / "wheels"),
        "log": str(tmp_path / "build.log"),
        "progress": str(tmp_path / "progress.json"),
    }
    script = REPO / "sm120kit" / "remote" / "build_wheel.py"
    proc = subprocess.Popen(
        [sys.executable, str(script), json.dumps(args)], stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (tmp_path / "progress.json").exists():
            if json.loads((tmp_path / "progress.json").read_text())["done"] >= 1:
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the build never reported progress")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode != 0
    assert list((tmp_path / "wheels").iterdir()) == []
    # The sleeping setup.py went down with it: nothing holds the log open any more.
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tree) not in ps


def test_uv_front_end_command():
    cmd = build_wheel.build_command(
        {
            "python": "/env/bin/python",
            "src": "/s",
            "front_end": "uv",
            "pip_args": ["-Ccmake.define.ENABLE_BELOW_SM90=OFF"],
        },
        "/out/.tmp",
    )
    assert cmd == [
        "uv",
        "build",
        "--wheel",
        "--no-build-isolation",
        "--python",
        "/env/bin/python",
        "--out-dir",
        "/out/.tmp",
        "-Ccmake.define.ENABLE_BELOW_SM90=OFF",
        "/s",
    ]


def test_pip_front_end_keeps_backend_output():
    cmd = build_wheel.build_command({"python": "py", "src": "/s", "pip_args": []}, "/t")
    assert cmd[:6] == ["py", "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    assert "-v" in cmd  # without it the log has no compiler output to diagnose


# -- fetching sources ---------------------------------------------------------------------


def _sdist(tmp_path: Path) -> tuple[Path, str]:
    """A real sdist-shaped tarball of the fake package: one top-level name-version/ dir."""
    path = tmp_path / "served" / "files" / "fake_flash_attn-2.8.3.tar.gz"
    path.parent.mkdir(parents=True)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(FAKE_FA, arcname="fake_flash_attn-2.8.3")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, str]]:
    """A loopback HTTP server (127.0.0.1, free port) with an sdist and a PEP 503 index page."""
    sdist, digest = _sdist(tmp_path)
    index = tmp_path / "served" / "simple" / "fake-flash-attn"
    index.mkdir(parents=True)
    (index / "index.html").write_text(
        f'<html><body><a href="../../files/{sdist.name}#sha256={digest}">{sdist.name}</a>'
        '<a href="../../files/fake_flash_attn-2.8.2.tar.gz#sha256=00">old</a></body></html>'
    )
    handler = functools.partial(_QuietHandler, directory=str(tmp_path / "served"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sdist, digest
    finally:
        server.shutdown()
        server.server_close()


def _fetch(args: dict) -> dict:
    return run_script(local_connection(), "fetch_source", args)


def test_sdist_fetched_verified_unpacked_once(served, tmp_path: Path):
    base, sdist, digest = served
    dest = tmp_path / "work" / "src" / "flash-attn"
    args = {
        "kind": "url",
        "url": f"{base}/files/{sdist.name}",
        "sha256": digest,
        "dest": str(dest),
        "cache_dir": str(tmp_path / "work" / "cache"),
    }
    first = _fetch(args)
    assert first["ok"] and first["changed"], first
    assert (dest / "setup.py").exists()  # the sdist's top-level dir became the tree
    marker = json.loads((dest / fetch_source.MARKER).read_text())
    assert marker["identity"]["sha256"] == digest
    assert first["tree_sha256"] == fetch_source.tree_hash(dest)
    again = _fetch(args)
    assert again["ok"] and again["changed"] is False


def test_sdist_resolved_from_a_simple_index(served, tmp_path: Path):
    base, _, digest = served
    result = _fetch(
        {
            "kind": "sdist",
            "package": "fake_flash_attn",
            "version": "2.8.3",
            "index_url": f"{base}/simple",
            "sha256": digest,
            "dest": str(tmp_path / "d"),
            "cache_dir": str(tmp_path / "c"),
        }
    )
    assert result["ok"], result
    assert result["identity"]["url"].endswith("/files/fake_flash_attn-2.8.3.tar.gz")


def test_sdist_hash_mismatch_is_refused_and_leaves_nothing(served, tmp_path: Path):
    base, sdist, digest = served
    wrong = "0" * 64
    dest = tmp_path / "work" / "src" / "flash-attn"
    cache = tmp_path / "work" / "cache"
    result = _fetch(
        {
            "kind": "url",
            "url": f"{base}/files/{sdist.name}",
            "sha256": wrong,
            "dest": str(dest),
            "cache_dir": str(cache),
        }
    )
    assert result["ok"] is False
    assert f"expected {wrong}, got {digest}" in result["error"]
    assert sdist.name in result["error"]
    assert not dest.exists()
    assert list((tmp_path / "work" / "src").iterdir()) == []  # no temp dirs either
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_path_source_from_uploaded_tarball(tmp_path: Path):
    """kind=path: the controller tars a local tree and puts it; the host unpacks it and the
    tree hash both sides compute must agree."""
    tarball = tmp_path / "upload.tar"
    with tarfile.open(tarball, "w") as tar:
        tar.add(FAKE_FA, arcname=".")
    expected = fetch_source.tree_hash(FAKE_FA)
    dest = tmp_path / "src"
    ok = _fetch(
        {
            "kind": "path",
            "tarball": str(tarball),
            "tree_sha256": expected,
            "dest": str(dest),
            "cache_dir": str(tmp_path / "c"),
        }
    )
    assert ok["ok"] and ok["tree_sha256"] == expected
    assert (
        _fetch(
            {"kind": "path", "tarball": str(tarball), "tree_sha256": expected, "dest": str(dest)}
        )["changed"]
        is False
    )
    bad = _fetch(
        {
            "kind": "path",
            "tarball": str(tarball),
            "tree_sha256": "f" * 64,
            "dest": str(tmp_path / "other"),
        }
    )
    assert not bad["ok"] and "tree hash mismatch" in bad["error"]
    assert not (tmp_path / "other").exists()


def test_archive_escaping_the_tree_is_refused(tmp_path: Path):
    tarball = tmp_path / "evil.tar"
    with tarfile.open(tarball, "w") as tar:
        data = b"owned\n"
        info = tarfile.TarInfo("../../escape.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    result = _fetch({"kind": "path", "tarball": str(tarball), "dest": str(tmp_path / "d" / "x")})
    assert not result["ok"] and "outside the tree" in result["error"]
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "d" / "x").exists()


def test_git_source_needs_the_commit(tmp_path: Path):
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    result = _fetch(
        {
            "kind": "git",
            "repo": str(repo),
            "commit": "deadbeef" * 5,
            "dest": str(tmp_path / "d"),
            "cache_dir": str(tmp_path / "c"),
        }
    )
    assert not result["ok"] and "git" in result["error"]
    assert not (tmp_path / "d").exists()


def test_scripts_are_stdlib_only():
    """Remote scripts run on hosts without sm120kit or third-party packages."""
    for name in ("build_wheel", "fetch_source", "patch_tree"):
        source = script_bundle(name)  # the script with the library modules it imports
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-", "{}"],
            input=source,
            capture_output=True,
            text=True,
            cwd="/",
        )
        doc = json.loads(proc.stdout)
        assert doc["ok"] is False and "Traceback" not in proc.stderr, (name, proc.stderr)


def test_minikernel_setup_translates_arch_list_like_cpp_extension():
    """The sample's own TORCH_CUDA_ARCH_LIST translation matches docs/stack-facts.md section 3 (pure function)."""
    path = REPO / "examples" / "minikernel" / "setup.py"
    # Everything above the TORCH_PIN / setup(...) part defines helpers; run only that.
    namespace: dict = {"__file__": str(path)}
    exec(compile(path.read_text().split("\nTORCH_PIN")[0], str(path), "exec"), namespace)
    flags = namespace["gencode_flags"]
    assert flags("12.0") == ["-gencode=arch=compute_120,code=sm_120"]
    assert flags("12.0+PTX") == [
        "-gencode=arch=compute_120,code=sm_120",
        "-gencode=arch=compute_120,code=compute_120",
    ]
    assert flags("12.0a;9.0") == [
        "-gencode=arch=compute_120a,code=sm_120a",
        "-gencode=arch=compute_90,code=sm_90",
    ]
