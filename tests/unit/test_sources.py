"""The controller's source store (sm120kit/builds/sources.py), the recipe's `dependencies`, and the
sgl-kernel target prediction. Real git repositories on disk, and a real `git daemon` on
loopback serving them over git's network protocol, stand in for GitHub (no network here); the
real upstream trees are tests/real/test_sgl_kernel_real.py's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120kit.builds import cmake_defines
from sm120kit.builds import sources as src
from sm120kit.errors import HostFailed, RecipeError
from sm120kit.packages import sgl_kernel_cmake as sglkernel
from sm120kit.recipes.checks import _Bad, _dependencies
from sm120kit.recipes.model import PackageSpec
from sm120kit.remote import fetch_source as fs


def git_repo(root: Path, files: dict[str, str]) -> str:
    """A one-commit repository at `root` holding `files`; returns the commit."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_git_fetch_with_subdir_and_submodule(tmp_path: Path) -> None:
    """A package tree (a subdir of its repository) and a dependency with a submodule, fetched
    by git into the store; digests are the trees' hashes; a second fetch does nothing."""
    mono = git_repo(tmp_path / "mono", {"pkg/CMakeLists.txt": "project(x)\n", "README": "r\n"})
    sub = git_repo(tmp_path / "sub", {"include/s.h": "// s\n"})
    dep = git_repo(tmp_path / "dep", {"include/d.h": "// d\n"})
    pkg = PackageSpec(
        "demo",
        "1.0",
        source={"kind": "git", "url": str(tmp_path / "mono"), "ref": mono, "subdir": "pkg"},
        dependencies=[
            {
                "name": "repo-dep",
                "dir": "dep",
                "url": str(tmp_path / "dep"),
                "ref": dep,
                "submodules": [{"path": "ext/sub", "url": str(tmp_path / "sub"), "ref": sub}],
            }
        ],
    )
    assert src.is_managed(pkg)
    entries = src.entries("demo", pkg)
    assert [e.dir for e in entries] == ["pkg", "dep"]
    assert entries[1].define == "FETCHCONTENT_SOURCE_DIR_REPO-DEP"
    store = tmp_path / "store"
    first = src.fetch_all(store, entries)
    assert [changed for _, changed in first] == [True, True]
    own, dependency = (record for record, _ in first)
    assert own["origin"] == f"git {tmp_path / 'mono'}@{mono}"
    unpacked = tmp_path / "check"
    fs.unpack(dependency["tarball"], str(unpacked))
    assert (unpacked / "ext" / "sub" / "include" / "s.h").read_text() == "// s\n"
    assert dependency["digest"] == fs.tree_hash(str(unpacked))
    assert dependency["files"] == 2 and own["files"] == 1  # only the subdir: no README
    again = src.fetch_all(store, entries)
    assert [changed for _, changed in again] == [False, False]
    listed = src.list_store(store)
    assert {(r["dir"], r["digest"]) for r in listed} == {
        ("pkg", own["digest"]),
        ("dep", dependency["digest"]),
    }


@pytest.fixture
def git_daemon(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real `git daemon` on 127.0.0.1 exporting every repository under the returned
    directory: (base URL, directory)."""
    served = tmp_path / "served"
    served.mkdir()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            f"--base-path={served}",
            "--listen=127.0.0.1",
            f"--port={port}",
            str(served),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # `git daemon` runs git-daemon as its child: killing only the wrapper left the
        # listener running after every test. Its own process group goes whole.
        start_new_session=True,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert proc.poll() is None, "git daemon exited"
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}", served
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.parametrize("protocol", ["2", "0"])
def test_git_fetch_over_the_network_by_sha_or_by_branches(
    git_daemon: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """The pin is not a branch tip. Over protocol v2 (what GitHub speaks) the commit is fetched
    by its sha; a v0 server refuses that ("unadvertised object") and every branch and tag is
    fetched instead. Both give the same tree. A commit no branch holds is one clear error."""
    url, served = git_daemon
    repo = served / "dep"
    pinned = git_repo(repo, {"include/d.h": "// pinned\n"})
    later = git_repo(repo, {"include/d.h": "// later\n"})
    assert later != pinned
    # The client's protocol version decides the server's rules for a want by sha.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "protocol.version")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", protocol)
    entries = src.entries(
        "demo",
        PackageSpec(
            "demo", "1.0", source={"kind": "git", "url": f"{url}/dep", "ref": pinned, "subdir": ""}
        ),
    )
    [(record, changed)] = src.fetch_all(tmp_path / "store", entries)
    assert changed and record["origin"] == f"git {url}/dep@{pinned}"
    unpacked = tmp_path / "check"
    fs.unpack(record["tarball"], str(unpacked))
    assert (unpacked / "include" / "d.h").read_text() == "// pinned\n"
    [bare] = (tmp_path / "store" / ".git" / "git").iterdir()
    refs = subprocess.run(
        ["git", "-C", str(bare), "for-each-ref"], capture_output=True, text=True, check=True
    ).stdout
    assert bool(refs) == (protocol == "0")  # branches were fetched only where the sha was refused

    # A commit that exists nowhere on the server: the error names it and the repository.
    ghost = "0" * 39 + "1"
    entries = src.entries(
        "demo",
        PackageSpec("demo", "1.0", source={"kind": "git", "url": f"{url}/dep", "ref": ghost}),
    )
    with pytest.raises(HostFailed) as err:
        src.fetch_all(tmp_path / "store2", entries)
    assert f"commit {ghost} is not in {url}/dep" in str(err.value)
    assert "sources_mirror" in str(err.value)


def test_mirror_layout_manifest_note_and_git_fallback(tmp_path: Path) -> None:
    """A mirror directory per `dir`; a MANIFEST.tsv listing another commit is recorded as a
    note; an entry the mirror lacks comes from git; an unreachable one names the mirror."""
    mirror = tmp_path / "mirror"
    (mirror / "dep").mkdir(parents=True)
    (mirror / "dep" / "a.h").write_text("// a\n")
    (mirror / "MANIFEST.tsv").write_text("name\tupstream_repo\tcommit\ndep\tx\tabc123 (note)\n")
    other = git_repo(tmp_path / "other", {"b.h": "// b\n"})
    dep = src.SourceEntry("demo", "dep", "https://example.invalid/dep", "def456", fetchcontent="d")
    from_git = src.SourceEntry("demo", "other", str(tmp_path / "other"), other, fetchcontent="o")
    store = tmp_path / "store"
    record, _ = src.fetch_entry(store, dep, mirror)
    assert record["origin"] == f"mirror {mirror / 'dep'}"
    assert record["note"] == "the mirror's MANIFEST.tsv lists abc123, not the pinned def456"
    assert record["digest"] == fs.tree_hash(str(mirror / "dep"))
    record, _ = src.fetch_entry(store, from_git, mirror)
    assert record["origin"].startswith("git ")
    lost = src.SourceEntry("demo", "lost", str(tmp_path / "nowhere"), "0" * 40, fetchcontent="l")
    with pytest.raises(HostFailed, match="set sources_mirror to a directory holding lost/"):
        src.fetch_entry(store, lost, mirror)
    assert not (store / "demo" / lost.slot).exists()


def test_refresh_replaces_only_a_changed_tree(tmp_path: Path) -> None:
    """A stored entry is trusted until `refresh`: a mirror patched in place (same commit
    claimed) is read again, and only the entry whose digest changed is replaced."""
    mirror = tmp_path / "mirror"
    for name in ("one", "two"):
        (mirror / name).mkdir(parents=True)
        (mirror / name / "x.h").write_text(f"// {name}\n")
    wanted = [
        src.SourceEntry("demo", n, f"https://example.invalid/{n}", "a" * 40, fetchcontent=n)
        for n in ("one", "two")
    ]
    store = tmp_path / "store"
    first = [record for record, _ in src.fetch_all(store, wanted, mirror)]
    (mirror / "two" / "x.h").write_text("// two, patched\n")
    assert [changed for _, changed in src.fetch_all(store, wanted, mirror)] == [False, False]
    again = src.fetch_all(store, wanted, mirror, refresh=True)
    assert [changed for _, changed in again] == [False, True]
    assert again[0][0]["fetched_at"] == first[0]["fetched_at"]  # untouched record
    assert again[1][0]["digest"] == fs.tree_hash(str(mirror / "two")) != first[1]["digest"]
    assert src.read_record(store, wanted[1])["digest"] == again[1][0]["digest"]
    assert [changed for _, changed in src.fetch_all(store, wanted, mirror, True)] == [False] * 2


def test_recipe_dependencies_are_validated() -> None:
    good = [{"name": "repo-a", "dir": "a", "url": "https://x/a", "ref": "1" * 40}]
    assert _dependencies(good)[0]["submodules"] == []
    for bad, why in [
        ({"name": "r", "dir": "a", "url": "u"}, "missing"),
        ({"name": "r", "dir": "a", "url": "u", "ref": "x", "tag": "y"}, "unknown key"),
        ({"name": "r", "dir": "../a", "url": "u", "ref": "x"}, "not a unique name"),
    ]:
        with pytest.raises(_Bad, match=why):
            _dependencies([bad])
    with pytest.raises(_Bad, match="not a unique name"):
        _dependencies(good + good)
    with pytest.raises(RecipeError, match="needs a pinned git source"):
        src.entries(
            "x",
            PackageSpec(
                "x", "1.0", source={"kind": "git", "url": "u", "ref": ""}, dependencies=good
            ),
        )


def test_predicted_targets_follow_the_0321_cmake() -> None:
    """CUDA 12.8: sm_100a/sm_120a join, no sm_103a; FlashMLA's `VERSION_GREATER 12.8` leaves
    out its sm_100a there. CUDA 13.0 with the SM-only build: common_ops sm100 and
    spatial_ops at sm_120a only."""
    t128 = sglkernel.predict_targets("0.3.21", "12.8")
    assert t128 is not None
    assert t128["common_ops_sm90_build"] == [
        "sm_90",
        "sm_80",
        "sm_89",
        "sm_100a",
        "sm_120a",
        "sm_90a",
    ]
    assert t128["flashmla_ops"] == ["sm_90a"]
    assert t128["flash_ops"] == ["sm_90a", "sm_80", "sm_86"]
    only = sglkernel.predict_targets("0.3.21", "13.0", "120a", below_sm90=False)
    assert only is not None
    assert only["common_ops_sm100_build"] == only["spatial_ops"] == ["sm_120a"]
    assert "common_ops_sm90_build" not in only and "flash_ops" not in only
    assert sglkernel.missing_arch(only, ["sm_120a"]) == []
    assert sglkernel.predict_targets("0.4.0", "13.0") is None
    assert cmake_defines.fetchcontent_defines([("repo-flash-attention", "/s/fa")]) == {
        "FETCHCONTENT_SOURCE_DIR_REPO-FLASH-ATTENTION": "/s/fa",
        "FETCHCONTENT_FULLY_DISCONNECTED": "ON",
    }
