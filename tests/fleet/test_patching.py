"""Patches: the stdlib applier (remote/patch_tree.py), the controller helpers, and the SM120
loader patch for sgl-kernel in all three states against the fixture tree."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sm120kit.builds.knobs import resolve_knobs
from sm120kit.builds.patching import (
    ALREADY_APPLIED,
    APPLIES,
    DOES_NOT_APPLY,
    applicable,
    check_and_apply,
    load_patch,
    load_patches,
    parse_header,
    select,
)
from sm120kit.errors import PatchError, RecipeError
from sm120kit.inventory.host import Host
from sm120kit.remote import patch_tree, run_script, script_bundle
from sm120kit.runner.connection import LocalConnection
from sm120kit.runner.host_context import HostContext
from sm120kit.runner.pool import outside_run

REPO = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).parent.parent / "fixtures" / "sglkernel_tree"
SM120_PATCH = REPO / "patches" / "sgl-kernel" / "0001-load-utils-sm120.patch"
LOADER = Path("python/sgl_kernel/load_utils.py")


def conn() -> LocalConnection:
    return LocalConnection(Host("local", vars={"ansible_connection": "local"}))


def ctx() -> HostContext:
    """The local host's context outside a run: scripts go through the logged run API."""
    return outside_run(Host("local", vars={"ansible_connection": "local"}))


def snapshot(root: Path) -> dict[str, str]:
    """Every file's sha256 and mode: 'unchanged' means byte-identical, nothing added."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        + oct(p.stat().st_mode)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dest = tmp_path / "sgl-kernel"
    shutil.copytree(FIXTURE, dest)
    return dest


# -- the SM120 loader patch, three states ------------------------------------------------------


def test_sm120_patch_header():
    patch = load_patch(SM120_PATCH)
    assert str(patch.applies_to) in (">=0.3.17,<=0.3.21", "<=0.3.21,>=0.3.17")
    # sglang's commit for sgl-kernel 0.3.21 (the old header's 7252a238... is not in its history).
    assert "c86ca12875bbdea8f39267f02a0d55c68ea99d8e" in patch.header["Upstream"]
    assert "c0652d907b" in patch.header["Upstream"]  # where load_utils.py appeared
    assert "12.x" in patch.fixes and "in no recipe" in patch.fixes
    assert patch.files == ["python/sgl_kernel/load_utils.py"]
    assert applicable(patch, "0.3.21")
    assert not applicable(patch, "0.3.16")  # the header's range starts at 0.3.17
    assert not applicable(patch, "0.4.0")


def test_sm120_patch_applies_then_is_already_applied(tree: Path):
    patch = load_patch(SM120_PATCH)
    report = check_and_apply(ctx(), str(tree), [patch], apply=False)
    assert report.state(patch.name) == APPLIES
    assert not report.applied
    assert (
        "elif compute_capability is not None and compute_capability // 10 == 12"
        not in (tree / LOADER).read_text()
    )

    report = check_and_apply(ctx(), str(tree), [patch])
    assert report.state(patch.name) == APPLIES and report.applied
    text = (tree / LOADER).read_text()
    assert "compute_capability // 10 == 12" in text

    after = snapshot(tree)
    report = check_and_apply(ctx(), str(tree), [patch])
    assert report.state(patch.name) == ALREADY_APPLIED
    assert not report.applied
    assert snapshot(tree) == after


def test_sm120_patch_found_at_an_offset(tree: Path):
    """The fixture's loader is shorter than upstream's: the hunk says line 60, the lines sit
    at 50. An exact-context match at another line is accepted."""
    lines = (tree / LOADER).read_text().splitlines()
    assert lines.index("    if compute_capability == 90:") + 1 != 60
    assert check_and_apply(ctx(), str(tree), [load_patch(SM120_PATCH)]).applied


def test_sm120_patch_does_not_apply_to_a_fork(tree: Path):
    """A fork that maps capabilities differently: refused, rejected hunk shown, tree
    byte-identical."""
    loader = tree / LOADER
    loader.write_text(
        loader.read_text().replace(
            "if compute_capability == 90:", "if compute_capability in (89, 90):"
        )
    )
    before = snapshot(tree)
    with pytest.raises(PatchError) as err:
        check_and_apply(ctx(), str(tree), [load_patch(SM120_PATCH)])
    message = str(err.value)
    first = message.splitlines()[0]
    assert "0001-load-utils-sm120.patch does not apply to python/sgl_kernel/load_utils.py" in first
    assert "tree left unchanged" in first
    assert "@@ -60,6 +60,12 @@" in message
    assert "+    elif compute_capability is not None and compute_capability // 10 == 12:" in message
    assert snapshot(tree) == before


def _load_module(path: Path):
    spec = importlib.util.spec_from_file_location(f"loader_{abs(hash(path))}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ops_dirs(tree: Path) -> None:
    pkg = tree / "python" / "sgl_kernel"
    for name in ("sm90", "sm100", "sm120"):
        (pkg / name).mkdir()
        (pkg / name / "common_ops.py").write_text(f"BUILD = {name!r}\n")


@pytest.mark.parametrize(
    ("capability", "before", "after"),
    [
        (120, "sm100", "sm120"),
        (121, "sm100", "sm120"),
        (90, "sm90", "sm90"),
        (100, "sm100", "sm100"),
        (None, "sm100", "sm100"),
    ],
)
def test_patched_loader_picks_the_sm120_build(tree: Path, capability, before, after):
    """Runs the fixture loader before and after the patch with a stubbed compute capability
    (no GPU here): 12.x moves to sm120/ when a build provides it, others are untouched."""
    _ops_dirs(tree)
    unpatched = _load_module(tree / LOADER)
    unpatched._get_compute_capability = lambda: capability
    assert unpatched._load_architecture_specific_ops().BUILD == before

    check_and_apply(ctx(), str(tree), [load_patch(SM120_PATCH)])
    patched = _load_module(tree / LOADER)
    patched._get_compute_capability = lambda: capability
    assert patched._load_architecture_specific_ops().BUILD == after


def test_patched_loader_without_sm120_dir_uses_sm100(tree: Path):
    """Upstream's dual build has no sm120/: its sm100/ build carries the sm_120a code."""
    _ops_dirs(tree)
    shutil.rmtree(tree / "python" / "sgl_kernel" / "sm120")
    check_and_apply(ctx(), str(tree), [load_patch(SM120_PATCH)])
    patched = _load_module(tree / LOADER)
    patched._get_compute_capability = lambda: 120
    module = patched._load_architecture_specific_ops()
    assert module.BUILD == "sm100"
    assert "Blackwell SM12x, sm100 build" in module.variant_name


def test_sgl_kernel_from_git_commit_then_patched(tmp_path: Path):
    """sgl-kernel's source path end to end: a local git repository (standing in for sglang)
    with the fixture tree under sgl-kernel/, fetched at a pinned commit with the subdir
    extracted, the CMake defines rendered for it, the loader patch checked and applied."""
    repo = tmp_path / "sglang"
    shutil.copytree(FIXTURE, repo / "sgl-kernel")
    (repo / "README.md").write_text("stand-in for sglang\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(git + ["init", "-q", str(repo)], check=True)
    subprocess.run(git + ["-C", str(repo), "add", "-A"], check=True)
    subprocess.run(git + ["-C", str(repo), "commit", "-qm", "pin"], check=True)
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # A later commit must not leak into the pinned export.
    (repo / "sgl-kernel" / "LATER").write_text("after the pin\n")
    subprocess.run(git + ["-C", str(repo), "add", "-A"], check=True)
    subprocess.run(git + ["-C", str(repo), "commit", "-qm", "later"], check=True)

    dest = tmp_path / "work" / "src" / "sgl-kernel"
    args = {
        "kind": "git",
        "repo": str(repo),
        "commit": commit,
        "subdir": "sgl-kernel",
        "dest": str(dest),
        "cache_dir": str(tmp_path / "work" / "cache"),
    }
    first = run_script(conn(), "fetch_source", args)
    assert first["ok"] and first["changed"]
    assert first["identity"]["resolved"] == commit
    assert (dest / LOADER).exists() and not (dest / "LATER").exists()
    assert not (dest / "README.md").exists()  # only the subdir

    knobs = resolve_knobs(
        "sgl-kernel",
        "sgl-kernel",
        ["12.0"],
        {"cpu": {"count": 2}, "memory": {"available_bytes": 24 * 1024**3}},
        {},
    )
    assert "-Ccmake.define.ENABLE_BELOW_SM90=OFF" in knobs.pip_args
    assert "-Ccmake.define.SGL_KERNEL_ONLY_ARCHS=120a" in knobs.pip_args
    assert "-Ccmake.define.SGL_KERNEL_COMPILE_THREADS=1" in knobs.pip_args  # one gencode
    # The options the defines name exist in the (fixture) tree's CMakeLists (the SM-only
    # option as the CMake patch adds it; CMAKE_POLICY_VERSION_MINIMUM is CMake's own).
    cmake = (dest / "CMakeLists.txt").read_text()
    for arg in knobs.pip_args:
        option = arg.split(".")[2].split("=")[0]
        assert option == "CMAKE_POLICY_VERSION_MINIMUM" or option in cmake

    # The loader patch (the stand-in's CMakeLists is not upstream's: the CMake patch is
    # classified on the real tree in tests/real/test_sgl_kernel_real.py).
    loader_only = load_patches(REPO / "patches" / "sgl-kernel", [SM120_PATCH.name])
    patches, skipped = select(loader_only, "0.3.21")
    assert [p.name for p in patches] == [SM120_PATCH.name] and not skipped
    assert check_and_apply(ctx(), str(dest), patches).applied

    # Fetching again is a no-op (marker matches), and the patch is then "already applied".
    again = run_script(conn(), "fetch_source", args)
    assert again["ok"] and not again["changed"]
    assert check_and_apply(ctx(), str(dest), patches).state(SM120_PATCH.name) == ALREADY_APPLIED


# -- the applier in general ----------------------------------------------------------------


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_local(tree: Path, patches: list[tuple[str, str]], apply: bool = True) -> dict:
    return patch_tree.run(
        {"tree": str(tree), "apply": apply, "patches": [{"name": n, "text": t} for n, t in patches]}
    )


P_ONE = """\
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""

P_BAD = """\
--- a/b.txt
+++ b/b.txt
@@ -1,2 +1,2 @@
 alpha
-beta
+BETA
"""


def test_all_or_nothing_across_patches(tmp_path: Path):
    """Patch 1 applies, patch 2 does not: nothing is written."""
    write(tmp_path, "a.txt", "one\ntwo\nthree\n")
    write(tmp_path, "b.txt", "alpha\ngamma\n")
    before = snapshot(tmp_path)
    result = run_local(tmp_path, [("1.patch", P_ONE), ("2.patch", P_BAD)])
    assert [p["state"] for p in result["patches"]] == [APPLIES, DOES_NOT_APPLY]
    assert not result["ok"] and not result["applied"]
    assert result["patches"][1]["rejected"]["found"] == "alpha\ngamma\n"
    assert snapshot(tmp_path) == before


def test_later_patch_sees_earlier_one(tmp_path: Path):
    write(tmp_path, "a.txt", "one\ntwo\nthree\n")
    second = P_ONE.replace("-two\n+TWO", "-TWO\n+2")
    result = run_local(tmp_path, [("1.patch", P_ONE), ("2.patch", second)])
    assert [p["state"] for p in result["patches"]] == [APPLIES, APPLIES]
    assert (tmp_path / "a.txt").read_text() == "one\n2\nthree\n"


def test_create_delete_and_no_newline(tmp_path: Path):
    write(tmp_path, "gone.txt", "bye\n")
    write(tmp_path, "tail.txt", "x\ny")
    (tmp_path / "tail.txt").chmod(0o755)
    text = """\
--- /dev/null
+++ b/new/file.txt
@@ -0,0 +1,2 @@
+hello
+world
--- a/gone.txt
+++ /dev/null
@@ -1 +0,0 @@
-bye
--- a/tail.txt
+++ b/tail.txt
@@ -1,2 +1,2 @@
 x
-y
\\ No newline at end of file
+z
"""
    result = run_local(tmp_path, [("mixed.patch", text)])
    assert result["applied"], result
    assert (tmp_path / "new" / "file.txt").read_text() == "hello\nworld\n"
    assert not (tmp_path / "gone.txt").exists()
    assert (tmp_path / "tail.txt").read_text() == "x\nz\n"
    assert (tmp_path / "tail.txt").stat().st_mode & 0o777 == 0o755  # mode kept
    again = run_local(tmp_path, [("mixed.patch", text)])
    assert again["patches"][0]["state"] == ALREADY_APPLIED


def test_path_outside_tree_is_refused(tmp_path: Path):
    evil = P_ONE.replace("a/a.txt", "a/../../etc/passwd").replace("b/a.txt", "b/../../etc/passwd")
    result = run_local(tmp_path, [("evil.patch", evil)])
    assert result["patches"][0]["state"] == DOES_NOT_APPLY
    assert "outside the tree" in result["patches"][0]["rejected"]["reason"]


def test_missing_file_does_not_apply(tmp_path: Path):
    result = run_local(tmp_path, [("1.patch", P_ONE)])
    assert result["patches"][0]["rejected"]["reason"] == "file does not exist"


def test_nearest_match_wins_for_repeated_context(tmp_path: Path):
    body = "".join(f"line{i}\n" for i in range(40))
    write(tmp_path, "r.txt", "one\ntwo\nthree\n" + body + "one\ntwo\nthree\n")
    text = P_ONE.replace("a.txt", "r.txt").replace("@@ -1,3 +1,3 @@", "@@ -42,3 +42,3 @@")
    assert run_local(tmp_path, [("p", text)])["applied"]
    lines = (tmp_path / "r.txt").read_text().splitlines()
    assert lines[1] == "two" and lines[-2] == "TWO"


def test_matches_gnu_patch_on_the_fixture(tree: Path, tmp_path: Path):
    """Cross-check with GNU patch where it is installed (the hosts need not have it)."""
    if not shutil.which("patch"):
        pytest.skip("GNU patch not installed")
    other = tmp_path / "gnu"
    shutil.copytree(tree, other)
    subprocess.run(["patch", "-s", "-p1", "-d", str(other), "-i", str(SM120_PATCH)], check=True)
    check_and_apply(ctx(), str(tree), [load_patch(SM120_PATCH)])
    assert (tree / LOADER).read_bytes() == (other / LOADER).read_bytes()


def test_script_runs_standalone_on_stdin(tree: Path):
    """The applier as hosts run it: `python3 - ARGS` with the script on stdin, no sm120kit."""
    source = script_bundle("patch_tree")  # the script and the library modules it imports
    args = {
        "tree": str(tree),
        "apply": False,
        "patches": [{"name": "p", "text": SM120_PATCH.read_text()}],
    }
    proc = subprocess.run(
        [sys.executable, "-I", "-", json.dumps(args)],
        input=source,
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert json.loads(proc.stdout)["patches"][0]["state"] == APPLIES


# -- controller helpers ----------------------------------------------------------------------


def test_header_parsing():
    text = "# Applies-To: >=1.0\n# Fixes: a\n#   b\n# free comment\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert parse_header(text) == {"Applies-To": ">=1.0", "Fixes": "a b"}


def test_applicable_needs_header_and_recipe_spec(tmp_path: Path):
    path = tmp_path / "p.patch"
    path.write_text("# Applies-To: >=2.7.3\n" + P_ONE)
    patch = load_patch(path)
    assert applicable(patch, "2.8.3")
    assert applicable(patch, "2.8.3", "<2.9")
    assert not applicable(patch, "2.8.3", "<2.8")
    assert not applicable(patch, "2.7.0")
    assert applicable(patch, "2.9.0rc1")  # pre-releases count
    chosen, skipped = select([patch], "2.8.3", {"p.patch": "<2.8"})
    assert not chosen and "outside >=2.7.3 and <2.8" in skipped[0][1]


def test_bad_patch_files_are_one_line_errors(tmp_path: Path):
    bad_spec = tmp_path / "s.patch"
    bad_spec.write_text("# Applies-To: around 2.8\n" + P_ONE)
    with pytest.raises(RecipeError, match=r"s.patch: Applies-To: 'around 2.8'"):
        load_patch(bad_spec)
    not_diff = tmp_path / "n.patch"
    not_diff.write_text("just text\n")
    with pytest.raises(RecipeError, match="not a unified diff"):
        load_patch(not_diff)
    with pytest.raises(RecipeError, match="patch 'missing.patch' not found"):
        load_patches(tmp_path, ["missing.patch"])
