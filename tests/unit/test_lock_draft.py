"""`invoke lock.draft` with uv: the strict input parser, a reviewed lock never lost, wheel
stubs, one lock per Python, and plain installers reading the locks it writes
(sm120kit/stack/resolve.py, stack/write.py, stack/draft.py, cli/lock.py).

Real parts: tiny real wheels and sdists on real loopback PEP 503 indexes (tests/support/
tiny_index.py), the pinned uv resolving, `invoke` run as a user runs it. One index stands in
for PyPI, a second for NVIDIA's (https://pypi.nvidia.com/), which a wheel stub names.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import RecipeError
from sm120kit.stack.draft import Target, draft_lock
from sm120kit.stack.lock import dump_lock, load_lock
from sm120kit.stack.resolve import parse_index, parse_pin, python_versions, stub_index
from sm120kit.stack.write import check_writable, write_lock
from tests.support.tiny_index import SYSTEM_SO, make_wheel, serve

REPO = Path(__file__).resolve().parents[2]
PLATFORM = "manylinux_2_34_x86_64"


@pytest.mark.parametrize(
    "text",
    [
        'sglang==0.5.23; python_version < "3"',
        "sglang[all]==0.5.23",
        "sglang==",
        "sglang>=0.5",
        "sglang",
        "sglang == 0.5.23",
        "==0.5.23",
        "sglang===0.5.23",
        "sglang==0.5.23,<1",
        "sglang==not a version",
        "sglang @ https://example.invalid/x.whl",
        "",
        None,
    ],
)
def test_a_lock_input_is_name_equals_version_and_nothing_else(text: Any) -> None:
    with pytest.raises(RecipeError) as err:
        parse_pin(text, "--top")
    msg = str(err.value)
    assert msg.startswith("--top ") and "expected NAME==VERSION" in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("text", "want"),
    [("sglang==0.5.23", "sglang==0.5.23"), ("Foo_Bar==1.0rc5", "foo-bar==1.0rc5")],
)
def test_good_pins_are_normalised(text: str, want: str) -> None:
    assert parse_pin(text) == want


@pytest.mark.parametrize("text", ["notaurl", "ftp://x/simple", "https://", "", "pypi.org/simple"])
def test_an_index_must_be_a_url(text: str) -> None:
    with pytest.raises(RecipeError, match=r"^--index .*expected an index URL"):
        parse_index(text)


def _sdist(out: Path, name: str, version: str, pyproject: str) -> Path:
    """A real sdist (``.tar.gz``) with static PKG-INFO (uv reads it without building)."""
    base = f"{name.replace('-', '_')}-{version}"
    files = {
        f"{base}/PKG-INFO": f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n",
        f"{base}/pyproject.toml": pyproject,
    }
    path = out / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _stub_pyproject(index: str) -> str:
    """NVIDIA's wheel-stub pattern, as cuda-tile 1.6.0rc5's sdist on PyPI has it."""
    return (
        '[build-system]\nrequires = ["wheel-stub"]\nbuild-backend = "wheel_stub.buildapi"\n\n'
        f'[tool.wheel_stub]\nindex_url = "{index}"\n'
    )


def test_a_wheel_stub_sdist_names_its_index() -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = _stub_pyproject("https://pypi.nvidia.com/").encode()
        info = tarfile.TarInfo("cuda_tile-1.6.0rc5/pyproject.toml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert stub_index(buf.getvalue()) == "https://pypi.nvidia.com"
    assert stub_index(b"not a tarball") is None


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """ "NVIDIA": stubby 1.0's real wheel. "PyPI": app 1.0 -> stubby==1.0 (a wheel stub
    naming "NVIDIA"), app 2.0 -> plain 1.0 (sdist only), demo 1.0 with cp311 and cp312
    wheels (one with a real .so)."""
    nv_files = tmp_path_factory.mktemp("nvidia")
    make_wheel(nv_files, "stubby", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64")
    with serve(nv_files) as nv_url:
        files = tmp_path_factory.mktemp("pypi")
        make_wheel(files, "app", "1.0", requires=("stubby==1.0",))
        make_wheel(files, "app", "2.0", requires=("plain==1.0",))
        _sdist(files, "stubby", "1.0", _stub_pyproject(nv_url + "/"))
        _sdist(files, "plain", "1.0", '[build-system]\nbuild-backend = "setuptools.build_meta"\n')
        make_wheel(files, "demo", "1.0", tag="cp311-cp311-manylinux_2_17_x86_64")
        assert SYSTEM_SO is not None
        make_wheel(
            files, "demo", "1.0", tag="cp312-cp312-manylinux_2_17_x86_64", shared_object=SYSTEM_SO
        )
        with serve(files) as url:
            yield url, nv_url


def test_a_wheel_stub_stops_with_one_line_naming_its_index(indexes: Any, tmp_path: Path) -> None:
    url, nv_url = indexes
    with pytest.raises(RecipeError) as err:
        draft_lock(
            "app==1.0", python="3.11", platform=PLATFORM, target=None, cache=tmp_path, index=url
        )
    msg = str(err.value)
    assert msg.startswith("stubby 1.0 on this index is a wheel stub: its wheel is on " + nv_url)
    assert f"add --index {nv_url}" in msg and "\n" not in msg


def test_with_the_stubs_index_given_the_real_wheel_is_locked(indexes: Any, tmp_path: Path) -> None:
    url, nv_url = indexes
    lock = draft_lock(
        "app==1.0",
        python="3.11",
        platform=PLATFORM,
        target=None,
        cache=tmp_path,
        indexes=[url, nv_url],
    )
    stub = lock.entry("stubby")
    assert stub is not None and stub.filename == "stubby-1.0-cp311-cp311-manylinux_2_17_x86_64.whl"
    assert stub.url.startswith(nv_url.replace("/simple", "/files/")) and len(stub.sha256) == 64
    again = load_lock(_written(tmp_path, lock))
    assert again.entry("stubby") == stub


def _written(tmp: Path, lock: Any) -> Path:
    path = tmp / "pylock.cp311-x.toml"
    path.write_text(dump_lock(lock, ["test"]))
    return path


def test_an_sdist_only_distribution_stops_that_python(indexes: Any, tmp_path: Path) -> None:
    url, _ = indexes
    with pytest.raises(RecipeError) as err:
        draft_lock(
            "app==2.0", python="3.11", platform=PLATFORM, target=None, cache=tmp_path, index=url
        )
    assert str(err.value).startswith("plain 1.0 has no wheel for Python 3.11 on manylinux_2_34")


def test_the_pythons_a_release_has_wheels_for(indexes: Any) -> None:
    url, _ = indexes
    assert python_versions("demo==1.0", url) == ["3.11", "3.12"]
    assert python_versions("app==1.0", url) == []  # pure: the recipe's Pythons decide


def _lock_text(tmp: Path, indexes: Any, top: str = "demo==1.0", python: str = "3.11") -> Any:
    url, _ = indexes
    lock = draft_lock(
        top, python=python, platform=PLATFORM, target=None, cache=tmp / "c", index=url
    )
    return lock, dump_lock(lock, ["test"])


def test_a_lock_is_written_whole_and_its_difference_shown(indexes: Any, tmp_path: Path) -> None:
    lock, text = _lock_text(tmp_path, indexes)
    out = tmp_path / "locks" / "demo-1.0" / "pylock.cp311-manylinux_2_34_x86_64.toml"
    assert write_lock(out, text, lock)["file"] == "new"
    assert write_lock(out, text, lock)["file"] == "unchanged"
    # An empty or incomplete draft never replaces the reviewed file.
    for bad in ("", text.split("[[packages]]")[0], text.replace('lock-version = "1.0"', "")):
        with pytest.raises(RecipeError, match="incomplete, nothing written"):
            write_lock(out, bad, lock)
        assert out.read_text() == text
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]


@pytest.mark.parametrize("case", ["directory", "read-only", "parent-is-a-file"])
def test_an_out_that_cannot_be_written_is_one_line(tmp_path: Path, case: str) -> None:
    out = tmp_path / "lock.toml"
    if case == "directory":
        out.mkdir()
    elif case == "read-only":
        out.write_text("reviewed\n")
        out.chmod(0o444)
    else:
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "lock.toml"
    with pytest.raises(RecipeError) as err:
        check_writable(out, "--out")
    assert str(err.value).startswith(f"--out {out}: ") and "\n" not in str(err.value)


def test_a_replace_that_fails_leaves_the_file_and_no_temporary(
    indexes: Any, tmp_path: Path
) -> None:
    """os.replace onto a directory fails: the error is one line, nothing else is left."""
    lock, text = _lock_text(tmp_path, indexes)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(RecipeError, match="cannot write the lock"):
        write_lock(out, text, lock)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "out"]
    assert [p.name for p in out.iterdir()] == ["keep"]


def _invoke(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "invoke", "--search-root", str(REPO), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_task_keeps_a_reviewed_lock_on_every_bad_input(indexes: Any, tmp_path: Path) -> None:
    """One invoke per hostile input (issue 35): exit 1, one line naming the flag, the
    reviewed file byte for byte as it was, no temporary file anywhere."""
    url, _ = indexes
    env = {"SM120KIT_RELEASE_CACHE": str(tmp_path / "cache")}
    out = tmp_path / "locks" / "pylock.toml"
    good = _invoke(
        [
            "lock.draft",
            "--top",
            "demo==1.0",
            "--index",
            url,
            "--out",
            str(out),
            "--lock-python",
            "3.11",
            "--json",
        ],
        env,
    )
    assert good.returncode == 0, good.stderr
    reviewed = out.read_bytes()
    dead = f"http://127.0.0.1:{_closed_port()}/simple"
    cases = [
        (["--top", 'demo==1.0; python_version < "3"', "--index", url], "--top "),
        (["--top", "demo==", "--index", url], "--top "),
        (["--top", "demo>=1.0", "--index", url], "--top "),
        (["--top", "demo", "--index", url], "--top "),
        (["--top", "demo==1.0", "--index", dead], f"--index {dead}: cannot reach the index"),
        (["--top", "demo==1.0", "--index", "notaurl"], "--index 'notaurl'"),
        (["--top", "demo==1.0", "--index", url, "--lock-python", "3.x"], "--lock-python '3.x'"),
    ]
    for args, start in cases:
        proc = _invoke(["lock.draft", *args, "--out", str(out), "--json"], env)
        assert proc.returncode == 1, (args, proc.stderr)
        assert start in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert out.read_bytes() == reviewed
    for bad_out in (tmp_path / "locks", out):
        if bad_out == out:
            out.chmod(0o444)
        proc = _invoke(
            [
                "lock.draft",
                "--top",
                "demo==1.0",
                "--index",
                url,
                "--lock-python",
                "3.11",
                "--out",
                str(bad_out),
            ],
            env,
        )
        assert proc.returncode == 1 and f"--out {bad_out}: " in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert out.read_bytes() == reviewed
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith((".tmp", ".part"))]
    assert leftovers == []


def test_one_lock_per_python_and_a_difference_on_redraft(indexes: Any, tmp_path: Path) -> None:
    """Without --lock-python the release's own Pythons (cp311, cp312) are locked, each in
    its own file; the compiled cp312 file is read once."""
    url, _ = indexes
    env = {"SM120KIT_RELEASE_CACHE": str(tmp_path / "cache")}
    args = [
        "lock.draft",
        "--top",
        "demo==1.0",
        "--index",
        url,
        "--driver",
        "580.95.05",
        "--arch",
        "12.0",
        "--json",
    ]
    recipes = tmp_path / "tree" / "recipes"
    recipes.mkdir(parents=True)
    env["INVOKE_SM120KIT_RECIPES_DIR"] = str(recipes)
    proc = _invoke(args, env)
    assert proc.returncode == 0, proc.stderr
    import json

    doc = json.loads(proc.stdout)
    assert doc["pythons"] == ["3.11", "3.12"] and doc["skipped"] == []
    folder = tmp_path / "tree" / "locks" / "demo-1.0"
    assert sorted(p.name for p in folder.iterdir()) == [
        "catalogue.toml",
        "pylock.cp311-manylinux_2_34_x86_64.toml",
        "pylock.cp312-manylinux_2_34_x86_64.toml",
    ]
    assert [d["changes"]["file"] for d in doc["locks"]] == ["new", "new"]
    assert 'locks = "locks/demo-1.0"' in doc["stack"]
    # The catalogue beside the locks: the compiled wheel's module, read from its bytes.
    assert doc["catalogue"]["file"] == "written" and doc["catalogue"]["releases"] >= 1
    # Preflight's rules are re-checked; none is about a release without their distributions.
    assert doc["rules"] == []
    from sm120kit.stack.catalogue import load_beside

    cat = load_beside(folder)
    assert cat is not None and cat.lookup("demo", "1.0").known
    assert not cat.lookup("demo", "1.1").known
    again = json.loads(_invoke(args, env).stdout)
    assert [d["changes"]["file"] for d in again["locks"]] == ["unchanged", "unchanged"]
    assert again["catalogue"]["file"] == "unchanged"
    lock = load_lock(folder / "pylock.cp312-manylinux_2_34_x86_64.toml")
    native = lock.entry("demo")
    assert native is not None and native.compiled and native.verdict == "ok"
    assert Target  # the verdict's target came from --driver/--arch


@pytest.mark.parametrize(
    "order",
    [("3.12", "3.11"), ("3.11", "3.12"), ("both", "3.11"), ("both", "3.12")],
    ids=["312-then-311", "311-then-312", "both-then-311", "both-then-312"],
)
def test_a_directory_catalogue_covers_every_lock_in_it(
    indexes: Any, tmp_path: Path, order: tuple[str, str]
) -> None:
    """Locks of one release drafted one Python at a time (`--lock-python`) share one
    catalogue: a redraft of one Python keeps the wheels of the other Python's lock beside it
    (demo's cp312 wheel holds a real .so, its cp311 one does not), so the catalogue ends the
    same as one draft of both, and `lock.catalogue` of the directory agrees byte for byte."""
    import json

    from sm120kit.stack.catalogue import load_beside

    url, _ = indexes
    env = {"SM120KIT_RELEASE_CACHE": str(tmp_path / "cache")}
    recipes = tmp_path / "tree" / "recipes"
    recipes.mkdir(parents=True)
    env["INVOKE_SM120KIT_RECIPES_DIR"] = str(recipes)
    base = ["lock.draft", "--top", "demo==1.0", "--index", url, "--arch", "12.0", "--json"]
    folder = tmp_path / "tree" / "locks" / "demo-1.0"
    docs = []
    for python in order:
        extra = [] if python == "both" else ["--lock-python", python]
        proc = _invoke([*base, *extra], env)
        assert proc.returncode == 0, proc.stderr
        docs.append(json.loads(proc.stdout))
    assert sorted(p.name for p in folder.glob("pylock.*.toml")) == [
        "pylock.cp311-manylinux_2_34_x86_64.toml",
        "pylock.cp312-manylinux_2_34_x86_64.toml",
    ]
    cat = load_beside(folder)
    assert cat is not None
    [release] = [r for r in cat.releases if r.distribution == "demo"]
    tags = sorted(w.filename.split("-")[2] for w in release.wheels)
    assert tags == ["cp311", "cp312"]  # both locks' wheels, each once
    assert docs[-1]["catalogue"]["wheels"] == 2
    if order[0] == "both":  # the joint draft's catalogue is not changed by a one-Python one
        assert docs[-1]["catalogue"]["file"] == "unchanged"
    text = (folder / "catalogue.toml").read_bytes()
    proc = _invoke(["lock.catalogue", "--lock-dir", str(folder), "--json"], env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["file"] == "unchanged"
    assert (folder / "catalogue.toml").read_bytes() == text


def _venv(where: Path) -> Path:
    """A fresh venv of this interpreter, made by the pinned uv (no pip in it)."""
    subprocess.run(
        [sys.executable, "-m", "uv", "venv", "-q", "-p", sys.executable, str(where)],
        check=True,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
    )
    return where / "bin" / "python"


def _installed(python: Path) -> set[str]:
    code = "import importlib.metadata as m; print('\\n'.join(sorted(d.metadata['Name'] for d in m.distributions())))"
    out = subprocess.run(
        [str(python), "-I", "-c", code], capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


def test_plain_uv_and_pip_install_a_lock_without_the_tool(indexes: Any, tmp_path: Path) -> None:
    """The PEP 751 file alone: `uv pip install -r` (the pinned uv) and `pip install -r`
    (pip 26.1, the first pip that reads pylock.toml, in a throwaway venv) install exactly the
    lock's distributions from their URLs, hashes checked, with no sm120kit involved."""
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the tiny lock is for Python 3.11")
    url, nv_url = indexes
    lock = draft_lock(
        "app==1.0",
        python="3.11",
        platform=PLATFORM,
        target=None,
        cache=tmp_path / "c",
        indexes=[url, nv_url],
    )
    path = tmp_path / "pylock.cp311-manylinux_2_34_x86_64.toml"
    path.write_text(dump_lock(lock, ["tiny"]))
    want = {"app", "stubby"}
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"}
    by_uv = _venv(tmp_path / "uv")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "-q",
            "--python",
            str(by_uv),
            "-r",
            str(path),
        ],
        check=True,
        env=env,
    )
    assert _installed(by_uv) == want
    by_pip = _venv(tmp_path / "pip")
    got_pip = subprocess.run(
        [sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(by_pip), "pip==26.1"],
        capture_output=True,
        text=True,
        env=env,
    )
    if got_pip.returncode != 0:
        pytest.skip(
            f"pip 26.1 cannot be installed here (no index?): {got_pip.stderr.strip()[-200:]}"
        )
    subprocess.run(
        [
            str(by_pip),
            "-m",
            "pip",
            "install",
            "-q",
            "--isolated",
            "--disable-pip-version-check",
            "-r",
            str(path),
        ],
        check=True,
    )
    assert _installed(by_pip) - {"pip"} == want
