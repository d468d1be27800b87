"""Operations as pure functions (facts in, steps out) and the one step vocabulary: what `plan`
shows for a step is what provision runs for it.

The pure-function tests need no host. The interpreter tests run the hosts' step interpreter
(the bundled remote scripts, as hosts get them) on this machine, beside the same steps'
rendered shell lines run by bash, and compare the trees; the last test runs the patch
operation over SSH on the fleet, once in check mode and once for real.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sm120kit.builds.patching import Patch, load_patch, run_patch_steps
from sm120kit.errors import PatchError
from sm120kit.inventory.host import Host
from sm120kit.ops import pyenv
from sm120kit.ops import toolkit as tk
from sm120kit.plays.build import PATCHED_MARKER, ensure_patched, ensure_source, patch_steps
from sm120kit.plays.plan import PlanOptions, prepare
from sm120kit.remote import lib_closure, script_bundle, script_source
from sm120kit.runner.pool import HostContext, outside_run
from sm120kit.steps import RENDERERS, Step, commands, render
from tests.real.test_build_op import SGL_TREE, git_repo, host, run_op, sgl_recipes, sgl_vars, steps
from tests.real.test_pyenv import _spec as env_spec
from tests.real.test_toolkit import _entry
from tests.real.test_toolkit import _spec as toolkit_spec
from tests.support.fleet import Fleet

REPO = Path(__file__).resolve().parents[2]
LOADER_PATCH = REPO / "patches" / "sgl-kernel" / "0001-load-utils-sm120.patch"


def ops(steps: list[Step]) -> list[str]:
    return [s.op for s in steps]


# ------------------------------------------------------------------------------ the vocabulary


def test_a_step_is_json_and_renders_through_one_table() -> None:
    step = Step("mkdir", path="/w/a b")
    assert step == {"op": "mkdir", "path": "/w/a b"} and step.op == "mkdir"
    assert json.loads(json.dumps(step)) == step
    assert render(step) == ["mkdir -p '/w/a b'"]
    with pytest.raises(ValueError, match="unknown step op 'nope'"):
        Step("nope")
    with pytest.raises(ValueError, match="unknown step op 'nope'"):
        render({"op": "nope"})
    # Every op a remote script interprets has a renderer (and nothing else does).
    interpreted = {"clean", "mkdir", "download", "run", "link", "write", "copy", "rename"}
    interpreted |= {"remove", "verify", "select", "install_torch", "inspect", "marker", "patch"}
    # install_lock's (the stack: stack/stack_steps.py); "fetch" is the controller's own.
    interpreted |= {"fetch", "check", "unpack", "uv", "requirements", "record", "pth", "stage"}
    # Run by the controller itself (runner/step_run.py): the source and dependency uploads, and
    # the build's copy and link before build_wheel.py (ops/compile.py).
    interpreted |= {"upload", "script", "build"}
    assert set(RENDERERS) == interpreted


# ------------------------------------------------------------------------------ toolkit


def test_toolkit_operation_finds_or_plans_from_facts() -> None:
    """Facts in, decision out: a matching toolkit is used; otherwise the install's steps."""
    spec = toolkit_spec()
    found = {"cuda": [_entry("/usr/local/cuda-13.0", "13.0.88", "13.0.88")]}
    kwargs: dict[str, Any] = {"driver": "580.95.05", "python": "/usr/bin/python3"}
    op = tk.plan_toolkit(spec, found, host_vars={}, token="t0", **kwargs)
    assert op.install is None and op.found is not None
    assert op.found.cuda_home == "/usr/local/cuda-13.0"

    wrong = {"cuda": [_entry("/usr/local/cuda-12.8", "12.8.1", "12.8.93")]}
    op = tk.plan_toolkit(spec, wrong, host_vars={}, token="t0", **kwargs)
    assert op.found is None and op.rejected == [
        "12.8.1 at /usr/local/cuda-12.8: CUDA 12.8, not 13.0"
    ]
    assert op.install is not None
    assert ops(op.install.steps) == [
        # links: bin, include, lib, nvvm, lib64, the tree's own lib64, libcudart.so
        "clean", "mkdir", "write", "run", "link", "link", "link", "link", "link", "link", "link",
        "write", "mkdir", "write", "verify", "remove", "rename",
    ]  # fmt: skip
    tmp = "/w/toolkits/.cuda-13.0.2.tmp-t0"
    assert op.install.steps[-1] == {"op": "rename", "src": tmp, "dest": spec.prefix}
    assert op.install.cleanup == [tmp, "/w/tmp/nvcc-check-t0"]
    # The commands a plan shows are the steps' rendering, line for line.
    assert op.install.commands == commands(op.install.steps)
    # The same facts give the same steps (no hidden state: the token names the temp paths).
    again = tk.plan_toolkit(spec, wrong, host_vars={}, token="t0", **kwargs)
    assert again.install is not None and again.install.steps == op.install.steps


def test_toolkit_apt_route_depends_on_the_hosts_distro_and_user() -> None:
    spec = toolkit_spec(method="apt")
    facts = {"os": {"id": "debian", "version_id": "12"}, "arch": "x86_64", "user": "ci"}
    kwargs: dict[str, Any] = {"driver": None, "python": "python3", "host_vars": {}, "token": "t"}
    op = tk.plan_toolkit(spec, facts, has_password=True, **kwargs)
    assert op.install is not None and op.sudo == "sudo -S -p '' "
    assert "/repos/debian12/x86_64/" in op.install.apt_commands[1]
    root = tk.plan_toolkit(spec, {**facts, "user": "root"}, **kwargs)
    assert root.sudo == "" and root.install is not None
    assert root.install.apt_commands[2].startswith("dpkg -i ")
    # The apt route runs only the verify steps through the interpreter.
    assert ops(root.install.steps) == ["mkdir", "write", "verify", "remove"]


# ------------------------------------------------------------------------------ env


def test_env_operation_from_the_probe() -> None:
    """make_env's probe in, the env's steps out: nothing, added tools, or a (re)build."""
    spec = env_spec()
    python = {"path": "/usr/bin/python3.11", "version": "3.11.9"}
    good = {"spec": spec.identity(), "tools": list(spec.tools), "info": {}}
    assert (
        pyenv.plan_env(spec, {"exists": True, "marker": good, "python_ok": True}, python, {})
        is None
    )

    fewer = {**good, "tools": []}
    plan = pyenv.plan_env(spec, {"exists": True, "marker": fewer, "python_ok": True}, python, {})
    assert plan is not None and plan.what == "add ninja to env /w/envs/x"
    assert ops(plan.steps) == ["run", "inspect", "marker"] and plan.cleanup == []

    other = {**good, "spec": {**spec.identity(), "torch": "2.8.0"}}
    plan = pyenv.plan_env(spec, {"exists": True, "marker": other, "python_ok": True}, python, {})
    assert plan is not None and plan.what.startswith("rebuild env /w/envs/x (different spec)")
    assert ops(plan.steps) == [
        "remove",
        "run",
        "select",
        "run",
        "install_torch",
        "inspect",
        "marker",
    ]
    assert plan.cleanup == ["/w/envs/x"]

    plan = pyenv.plan_env(spec, {"exists": True, "marker": None}, python, {})
    assert plan is not None and "(incomplete: no marker)" in plan.what

    plan = pyenv.plan_env(spec, {"exists": False, "marker": None}, python, {})
    assert plan is not None
    assert plan.what == "create env /w/envs/x (Python 3.11.9, torch 2.9.1)"
    assert ops(plan.steps)[0] == "run" and render(plan.steps[0]) == [
        "/usr/bin/python3.11 -m venv /w/envs/x"
    ]
    # A marker whose python no longer runs is no env: rebuilt.
    broken = pyenv.plan_env(spec, {"exists": True, "marker": good, "python_ok": False}, python, {})
    assert broken is not None and ops(broken.steps)[0] == "remove"


# ------------------------------------------------------------------------------ patch


def _loader_patch() -> list[Patch]:
    return [load_patch(LOADER_PATCH)]


def test_patch_operation_steps() -> None:
    """The patched copy is made beside the tree and renamed over it only once it is complete."""
    want = {"source": "git:abc", "patches": [["0001-load-utils-sm120.patch", "f00"]]}
    fresh = patch_steps("/w/src/sk", "/w/build/sk/tree", _loader_patch(), want, in_place=False)
    assert ops(fresh) == ["copy", "patch", "write", "rename"]
    assert commands(fresh) == [
        "rm -rf /w/build/sk/tree.new && mkdir -p /w/build/sk && cp -a /w/src/sk /w/build/sk/tree.new",
        "patch_tree /w/build/sk/tree.new: 0001-load-utils-sm120.patch",
        f"printf '%s\\n' '{json.dumps(want)}' > /w/build/sk/tree.new/{PATCHED_MARKER}",
        "rm -rf /w/build/sk/tree && mv -T /w/build/sk/tree.new /w/build/sk/tree",
    ]
    assert fresh[1]["patches"][0]["text"] == LOADER_PATCH.read_text()
    in_place = patch_steps("/w/src/sk", "/w/build/sk/tree", _loader_patch(), want, in_place=True)
    assert commands(in_place) == ["patch_tree /w/build/sk/tree: 0001-load-utils-sm120.patch"]


# ------------------------------------------------------------------------------ the interpreter


def run_bundle(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run remote script `name` the way hosts get it: the bundle on stdin, no sm120kit there."""
    proc = subprocess.run(
        [sys.executable, "-I", "-", json.dumps(args)],
        input=script_bundle(name),
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert proc.stdout.strip(), proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def snapshot(root: Path) -> dict[str, Any]:
    """Every path under `root`: file text, link target or "dir"."""
    out: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_text()
    return out


def test_the_interpreter_does_what_the_rendered_lines_do(tmp_path: Path) -> None:
    """The same steps, once through the hosts' interpreter and once as `plan` shows them (run
    by bash): the same files come out."""

    def steps_in(root: Path) -> list[Step]:
        (root / "src" / "pkg").mkdir(parents=True)
        (root / "src" / "pkg" / "a.py").write_text("A = 1\n")
        (root / "toolkits").mkdir()
        (root / "toolkits" / ".cuda-1.tmp-old").mkdir()
        return [
            Step("clean", globs=[f"{root}/toolkits/.cuda-*.tmp-*"]),
            Step("mkdir", path=f"{root}/t/lib"),
            Step("write", path=f"{root}/t/version.json", text='{"v": "1"}\nsecond line\n'),
            Step("write", path=f"{root}/t/version.json", text="ignored\n", if_missing=True),
            Step("link", target="lib", path=f"{root}/t/lib64"),
            Step("run", argv=["touch", f"{root}/t/lib/x.so"]),
            Step("copy", src=f"{root}/src/pkg", dest=f"{root}/build/pkg/tree.new"),
            Step("rename", src=f"{root}/build/pkg/tree.new", dest=f"{root}/build/pkg/tree"),
            Step("remove", path=f"{root}/src"),
        ]

    by_script, by_shell = tmp_path / "script", tmp_path / "shell"
    doc = run_bundle("install_cuda", {"steps": steps_in(by_script), "cleanup": []})
    assert doc["ok"], doc
    for line in commands(steps_in(by_shell)):
        subprocess.run(["bash", "-ec", line], check=True)
    shown = snapshot(by_shell)
    assert snapshot(by_script) == shown
    assert shown["t/version.json"] == '{"v": "1"}\nsecond line\n'
    assert shown["t/lib64"] == ("link", "lib") and "src" not in shown
    assert shown["build/pkg/tree/a.py"] == "A = 1\n" and not any("cuda-1" in p for p in shown)


def test_the_interpreter_cleans_up_after_a_failed_step(tmp_path: Path) -> None:
    work = tmp_path / "w"
    doc = run_bundle(
        "install_cuda",
        {
            "steps": [Step("mkdir", path=f"{work}/tmp"), Step("run", argv=["false"])],
            "cleanup": [str(work)],
        },
    )
    assert not doc["ok"] and doc["done"] == 1 and doc["error"].startswith("false failed (exit 1)")
    assert not work.exists()


def test_patch_steps_apply_all_or_leave_the_tree(tmp_path: Path) -> None:
    """The patch operation's steps through patch_tree's interpreter: a copy is patched and
    renamed over the tree; a patch that does not apply removes the copy and names the hunk."""
    conn = outside_run(Host(name="local", vars={"ansible_connection": "local"}))
    src = tmp_path / "src"
    loader = src / "python" / "sgl_kernel" / "load_utils.py"
    loader.parent.mkdir(parents=True)
    loader.write_text((SGL_TREE / "python" / "sgl_kernel" / "load_utils.py").read_text())
    tree = tmp_path / "build" / "tree"
    want = {"source": "x", "patches": []}
    planned = patch_steps(str(src), str(tree), _loader_patch(), want, in_place=False)
    report = run_patch_steps(conn, planned, [str(tree) + ".new"], python=sys.executable)
    assert [e["state"] for e in report.states] == ["applies"]
    assert json.loads((tree / PATCHED_MARKER).read_text()) == want
    assert (
        "compute_capability // 10 == 12" in (tree / "python/sgl_kernel/load_utils.py").read_text()
    )
    assert not Path(str(tree) + ".new").exists()

    loader.write_text("nothing the patch expects\n")
    before = snapshot(tree)
    planned = patch_steps(str(src), str(tree), _loader_patch(), want, in_place=False)
    with pytest.raises(PatchError, match="does not apply to python/sgl_kernel/load_utils.py"):
        run_patch_steps(conn, planned, [str(tree) + ".new"], python=sys.executable)
    assert snapshot(tree) == before and not Path(str(tree) + ".new").exists()


def test_bundles_carry_the_library_they_import() -> None:
    assert lib_closure(script_source("make_env")) == [
        "sm120kit.remote.lib.download",
        "sm120kit.remote.lib.files",
        "sm120kit.remote.lib.in_target.env_facts",  # its inspect step's program, as text
        "sm120kit.remote.lib.proc",
        "sm120kit.remote.lib.steps",
    ]
    assert lib_closure("import json\n") == [] and script_bundle("host_lock").startswith('"""')


# ------------------------------------------------------------------------------ plan == provision


def test_plan_shows_the_commands_provision_runs_for_the_patch_step(
    fleet: Fleet, tmp_path: Path
) -> None:
    """`patch:sgl-kernel` in check mode, then for real, on a fleet host: the same commands."""
    repo, sha = git_repo(tmp_path / "sglang")
    sk = host(fleet, tmp_path, "sk", **sgl_vars(repo, sha))
    opts = PlanOptions(packages=["sgl-kernel"], recipes_dir=str(sgl_recipes(tmp_path)))

    def source_only(ctx: HostContext) -> None:
        ensure_source(ctx, prepare(ctx, opts), "sgl-kernel")

    def source_and_patch(ctx: HostContext) -> None:
        state = prepare(ctx, opts)
        ensure_patched(ctx, state, "sgl-kernel", ensure_source(ctx, state, "sgl-kernel"))

    run_op(fleet, tmp_path, [sk], source_only)
    plan = run_op(fleet, tmp_path, [sk], source_and_patch, check_mode=True)
    done = run_op(fleet, tmp_path, [sk], source_and_patch)

    def patch_step(result: Any) -> Any:
        return {s.name: s for s in result.hosts["sk"].steps}["patch:sgl-kernel"]

    shown, ran = patch_step(plan), patch_step(done)
    assert shown.status == ran.status == "changed", (steps(plan, "sk"), steps(done, "sk"))
    assert shown.message.startswith("would apply") and ran.message.endswith(": applies")
    assert shown.commands and shown.commands == ran.commands
    assert [c.split(" ")[0] for c in ran.commands] == ["rm", "patch_tree", "printf", "rm"]
