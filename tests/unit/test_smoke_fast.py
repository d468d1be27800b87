"""The fast parts of smoke's speed-up and its toolchain check (issue 32), as table tests of
pure functions plus one bare fork server run against this Python (no torch imported there):

- `remote/lib/forks.py`: a check forked from a fork server answers what a fresh interpreter
  answers (the same script, the same JSON, the same one-line failure);
- `remote/lib/probe_env.py` `catalogued`: when a file's device code is taken from the
  catalogue instead of read again (the env marker, the catalogue's wheel sha256, RECORD);
- `remote/lib/cuda_pieces.py`: every CUDA toolchain distribution named, a mix of minors warned.

Nothing is simulated but the env marker and RECORD rows, which are written here as the stack
install and pip write them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.packages import stack as serving
from sm120kit.remote.lib import cuda_pieces, forks, probe_env
from sm120kit.remote.lib.targets import LOAD_SRC, run_target

# ------------------------------------------------------------------ fork servers


@pytest.mark.parametrize(
    ("script", "args", "server"),
    [
        ("load", {"with_torch": True}, "torch"),
        ("load", {"with_torch": False}, "bare"),
        ("loader_eval", {"cc": [12, 0]}, "torch"),
        ("import_top", {"stub": True}, "torch"),
        ("import_top", {"stub": False}, "bare"),
        ("gpu_op", {"code": ""}, None),
        ("torch_info", {"gpu": True}, None),
    ],
)
def test_each_check_goes_to_the_server_whose_state_it_needs(
    script: str, args: dict[str, Any], server: str | None
) -> None:
    servers = forks.Servers(sys.executable, 10, enabled=False)
    servers.torch, servers.bare = "torch", "bare"  # type: ignore[assignment]
    try:
        assert servers.pick(script, args) == server
    finally:
        servers.torch = servers.bare = None
        servers.close()


@pytest.mark.parametrize(
    ("doc", "answer"),
    [
        ({"id": 1, "result": {"import": None}}, ({"import": None}, None)),
        ({"id": 1, "result": None, "error": "timed out after 5s"}, (None, "timed out after 5s")),
        ({"id": 1, "result": None, "signal": 11, "stderr": ""}, (None, "killed by signal 11")),
        (
            {"id": 1, "result": None, "exit": 1, "stderr": "ImportError: x\n"},
            (None, "ImportError: x"),
        ),
        ({"id": 1, "result": None, "exit": 3, "stderr": ""}, (None, "exit 3")),
    ],
)
def test_a_servers_answer_reads_as_a_fresh_runs(
    doc: dict[str, Any], answer: tuple[Any, Any]
) -> None:
    assert forks.answer(doc) == answer


def test_a_forked_check_answers_what_a_fresh_interpreter_answers(tmp_path: Path) -> None:
    """Real processes, this Python, the bare server only (no torch imported): an import alone
    that works, one that fails, and one whose interpreter dies, each forked and fresh."""
    (tmp_path / "ok_mod.py").write_text("import json\n")
    (tmp_path / "bad_mod.py").write_text("import no_such_module_here\n")
    (tmp_path / "boom_mod.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    )
    jobs = [
        {"module": n, "kind": "extension", "path": str(tmp_path / f"{n}.py"), "with_torch": False}
        for n in ("ok_mod", "bad_mod", "boom_mod")
    ]
    work = tmp_path / "work"
    work.mkdir()
    server = forks.ForkServer(sys.executable, False, str(work), 60)
    try:
        forked = [server.run("load", job, 60) for job in jobs]
    finally:
        server.close()
    fresh = [run_target(sys.executable, LOAD_SRC, job, 60) for job in jobs]
    assert forked == fresh
    assert forked[0] == ({"torch": None, "import": None, "dlopen": None}, None)
    assert "ModuleNotFoundError" in forked[1][0]["import"]  # type: ignore[index]
    assert forked[2] == (None, "killed by signal 11")
    assert server.started == 3 and sorted(os.listdir(work)) == ["server-0.err"]


@pytest.mark.parametrize(
    ("body", "flag", "torch_first"),
    [
        ("import torch\n", True, True),
        ("import ctypes\nctypes.CDLL({lib!r})\nimport torch\n", True, None),
        ("import torch\n", False, None),
    ],
    ids=["torch-first", "a-library-before-torch", "not-asked"],
)
def test_an_import_alone_that_imports_torch_first_stops_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, flag: bool, torch_first: Any
) -> None:
    """A package whose import reaches ``import torch`` before loading any library of its own
    (here a stand-in ``torch`` package, so nothing heavy is imported) is reported as such; one
    that loads a library first (a copy of a stdlib extension, outside the interpreter's
    lib-dynload) runs to its end."""
    dynload = Path(os.path.dirname(os.__file__)) / "lib-dynload"
    lib = tmp_path / "libcopy.so"
    lib.write_bytes(next(dynload.glob("_json*.so")).read_bytes())
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "tfpkg").mkdir()
    (tmp_path / "tfpkg" / "__init__.py").write_text(body.format(lib=str(lib)))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    job = {"module": "tfpkg", "kind": "package", "with_torch": False, "torch_first": flag}
    res, err = run_target(sys.executable, LOAD_SRC, job, 60)
    assert err is None and res is not None
    assert res.get("torch_first") is torch_first and res["import"] is None


# ------------------------------------------------------------------ catalogue trust


def _env(
    tmp_path: Path, size: int = 8, newer: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    lib = tmp_path / "pkg" / "_C.so"
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(b"x" * 8)
    marker = tmp_path / probe_env.STACK_RECORD
    marker.write_text(json.dumps({"packages": {"Pkg_Kernel": {"sha256": "S1", "version": "1.0"}}}))
    if newer:
        os.utime(lib, (os.stat(marker).st_mtime + 60,) * 2)
    else:
        os.utime(marker, (os.stat(lib).st_mtime + 60,) * 2)
    info = {
        "distribution": "pkg-kernel",
        "libraries": [
            {"path": str(lib), "rel": "pkg/_C.so", "record": {"sha256": "h", "size": size}}
        ],
    }
    return probe_env.env_marker(str(tmp_path)), info


FACTS = {"wheels": {"S1": {"source": "cat.toml", "modules": {"pkg/_C.so": {"sass": ["sm_120a"], "ptx": []}}}}}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "facts", "size", "newer", "trusted"),
    [
        ("the wheel the catalogue read, the file as recorded", FACTS, 8, False, True),
        ("no catalogue facts for the package", {}, 8, False, False),
        ("another wheel installed", {"wheels": {"S2": FACTS["wheels"]["S1"]}}, 8, False, False),
        ("the file's size is not its RECORD size", FACTS, 9, False, False),
        ("the file is newer than the install marker", FACTS, 8, True, False),
    ],
)
def test_device_code_is_taken_from_the_catalogue_only_for_the_wheel_it_read(
    tmp_path: Path, case: str, facts: dict[str, Any], size: int, newer: bool, trusted: bool
) -> None:
    marker, info = _env(tmp_path, size, newer)
    got = probe_env.catalogued(marker, info, facts)
    assert bool(got) is trusted, case
    if trusted:
        (entry,) = got.values()
        assert entry["sass"] == ["sm_120a"] and entry["source"] == "cat.toml (wheel sha256 S1)"


def test_no_marker_no_trust(tmp_path: Path) -> None:
    assert probe_env.env_marker(str(tmp_path)) == {}
    assert probe_env.env_marker(None) == {}
    _marker, info = _env(tmp_path)
    assert probe_env.catalogued({}, info, FACTS) == {}


def test_the_shipped_catalogue_gives_each_wheel_its_modules() -> None:
    wheels = serving.catalogue_wheels(["sgl-kernel"])
    mods = wheels["043cbe4a10e7887ea1b25599b729ff1ce115a0d5217b2c177aff9f9ae5327724"]["modules"]
    assert mods["sgl_kernel/flashmla_ops.abi3.so"]["sass"] == ["sm_90a", "sm_100f", "sm_103a"]
    assert serving.smoke_facts("sglang-kernel")["wheels"] == wheels  # either name


# ------------------------------------------------------------------ CUDA toolchain pieces


@pytest.mark.parametrize(
    ("name", "piece"),
    [
        ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc"),
        ("nvidia_cuda_nvcc_cu12", "nvidia-cuda-nvcc"),
        ("Nvidia.Cuda.Runtime-cu13", "nvidia-cuda-runtime"),
        ("cuda_toolkit", "cuda-toolkit"),
        ("nvidia-cublas", None),  # its own version line, not the CUDA release's
        ("nvidia-cufft-cu12", None),
    ],
)
def test_piece_names(name: str, piece: str | None) -> None:
    assert cuda_pieces.piece_name(name) == piece


def _piece(dist: str, version: str) -> dict[str, Any]:
    return {"distribution": dist, "version": version, "cuda": cuda_pieces.minor_of(version),
            "what": cuda_pieces.PIECES[cuda_pieces.piece_name(dist) or ""]}  # fmt: skip


@pytest.mark.parametrize(
    ("pieces", "torch_cuda", "status", "mixed", "said"),
    [
        ([], "13.0", "skip", None, "no CUDA toolchain distribution"),
        (
            [_piece("nvidia-cuda-nvcc", "13.0.88"), _piece("nvidia-cuda-runtime", "13.0.96")],
            "13.0",
            "pass",
            None,
            "one CUDA minor: 13.0: nvidia-cuda-nvcc 13.0.88, nvidia-cuda-runtime 13.0.96, torch",
        ),
        (  # the env of issue 32: humming-kernels' nvcc 13.5 beside torch's 13.0 headers
            [
                _piece("nvidia-cuda-nvcc", "13.5.37"),
                _piece("nvidia-cuda-runtime", "13.0.96"),
                _piece("nvidia-nvvm", "13.5.37"),
            ],
            "13.0",
            "warn",
            ["nvidia-cuda-nvcc", "nvidia-cuda-runtime"],
            "nvidia-cuda-nvcc 13.5.37 (nvcc, CUDA 13.5) beside nvidia-cuda-runtime 13.0.96",
        ),
        (  # no nvcc: the odd one out named beside the headers
            [_piece("nvidia-cuda-nvrtc", "13.1.80"), _piece("nvidia-cuda-runtime", "13.0.96")],
            "13.0",
            "warn",
            ["nvidia-cuda-nvrtc", "nvidia-cuda-runtime"],
            "nvidia-cuda-nvrtc 13.1.80 (NVRTC, CUDA 13.1) beside nvidia-cuda-runtime 13.0.96",
        ),
        (  # torch built with another minor than the env's pieces
            [_piece("nvidia-cuda-nvcc", "12.9.86")],
            "12.8",
            "warn",
            ["nvidia-cuda-nvcc", "torch"],
            "nvidia-cuda-nvcc 12.9.86 (nvcc, CUDA 12.9) beside torch 2.9.1 (built with CUDA 12.8",
        ),
    ],
)
def test_mixed_minors_are_named(
    pieces: list[dict[str, Any]],
    torch_cuda: str,
    status: str,
    mixed: list[str] | None,
    said: str,
) -> None:
    check = cuda_pieces.judge_pieces(pieces, "2.9.1", torch_cuda)
    assert check["check"] == "cuda_toolchain"
    assert check["status"] == status
    assert check["details"].get("mixed") == mixed
    assert said in check["reason"]


def test_pieces_are_read_from_the_dist_info_names(tmp_path: Path) -> None:
    for name in (
        "nvidia_cuda_nvcc-13.5.37",
        "nvidia_cuda_runtime-13.0.96",
        "nvidia_cublas-13.1.1.3",
    ):
        (tmp_path / f"{name}.dist-info").mkdir()
    got = cuda_pieces.installed_pieces([str(tmp_path)])
    assert [(p["distribution"], p["version"], p["cuda"]) for p in got] == [
        ("nvidia-cuda-nvcc", "13.5.37", "13.5"),
        ("nvidia-cuda-runtime", "13.0.96", "13.0"),
    ]
