"""The build's dry run: `invoke plan --package P` runs the build operation in check mode.

Over the sshd fleet (a real SSH session to a fleet host, each test its own work_root): the
dry run lists every step the build would run, each with what it would do, and changes
nothing on the host (its work_root is not even created); the real build after it changes
exactly the steps the dry run listed, with the cache key the dry run computed; a dry run
after the build finds nothing to do. The package is the fake flash-attn (a path source whose
setup.py compiles nothing, tests/fixtures/fake_flash_attn), so no GPU or nvcc compile is
needed; the toolkit is the system nvcc, the env a venv over the system torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.state import Toolkit
from tests.conftest import json_of
from tests.real.test_build_op import (
    assert_ok,
    fake_flash_attn,
    host,
    invoke,
    make_env,
    package_task,
    run_op,
    system_toolkit,
    write_inventory,
)
from tests.support.fleet import Fleet
from tests.support.sample_wheel import nvcc_available


def tree(root: Path) -> list[str]:
    """Every path under `root` (empty when it does not exist)."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_plan_package_is_the_builds_dry_run(fleet: Fleet, tmp_path: Path) -> None:
    """`invoke plan --package flash-attn` on a host where nothing exists yet: exit 0, the
    toolkit, env, source, wheel and install steps each "would ...", and the host's work_root
    does not exist afterwards (no lock, no download, no directory)."""
    inventory = write_inventory(tmp_path, fleet, {"fa": fake_flash_attn()})
    work_root = tmp_path / "fa" / "work"
    proc = invoke(tmp_path, fleet, inventory, "plan", "--package", "flash-attn", "-H", "fa")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json_of(proc)
    assert doc["check_mode"] is True
    fa = doc["hosts"]["fa"]
    names = [s["name"] for s in fa["steps"]]
    for step in ("source:flash-attn", "wheel:flash-attn", "install:flash-attn"):
        assert step in names, names
    changed = {s["name"]: s["message"] for s in fa["steps"] if s["status"] == "changed"}
    assert changed["source:flash-attn"].startswith("would fetch")
    assert changed["wheel:flash-attn"].startswith("would build")
    assert changed["install:flash-attn"].startswith("would install")
    assert not any(s["name"].startswith("smoke") for s in fa["steps"])  # build's steps only
    assert not work_root.exists(), tree(work_root)


@pytest.mark.timeout(900)
def test_a_build_after_its_dry_run_does_what_it_listed(fleet: Fleet, tmp_path: Path) -> None:
    """With the toolkit and env ready, the dry run knows the cache key and the exact build
    command; it leaves work_root as it was. The real build then changes exactly the steps
    the dry run said it would, builds the wheel of that key, and a dry run after it is all ok."""
    if not nvcc_available():
        pytest.skip("nvcc not installed")
    toolkit: Toolkit = system_toolkit()
    env = make_env(tmp_path / "env")
    fa = host(fleet, tmp_path, "fa", **fake_flash_attn())
    work_root = tmp_path / "fa" / "work"
    work_root.mkdir(parents=True)
    (work_root / "keep.txt").write_text("left alone\n")
    before = tree(work_root)

    dry = run_op(fleet, tmp_path, [fa], package_task("flash-attn", toolkit, env), check_mode=True)
    assert_ok(dry)
    assert tree(work_root) == before
    listed = {s.name: s for s in dry.hosts["fa"].steps if s.status == "changed"}
    assert set(listed) == {"source:flash-attn", "wheel:flash-attn", "install:flash-attn"}
    assert all(s.message.startswith("would ") for s in listed.values())
    assert any("pip" in c and "wheel" in c for c in listed["wheel:flash-attn"].commands)
    planned = dry.hosts["fa"].data["packages"]["flash-attn"]
    assert planned["key"]

    real = run_op(fleet, tmp_path, [fa], package_task("flash-attn", toolkit, env))
    assert_ok(real)
    done = {s.name for s in real.hosts["fa"].steps if s.status == "changed"}
    assert done == set(listed)
    record = real.hosts["fa"].data["packages"]["flash-attn"]
    assert record["key"] == planned["key"]
    assert record["wheel_from"] == "build" and record["installed"] == "now"

    again = run_op(fleet, tmp_path, [fa], package_task("flash-attn", toolkit, env), check_mode=True)
    assert_ok(again)
    assert [s.name for s in again.hosts["fa"].steps if s.status == "changed"] == []
