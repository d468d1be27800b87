"""Messages that say what happened: a full disk under work_root named as such whatever the
step, the default known_hosts checked up front like the setting, huge inventory values
shortened for people (JSON keeps them), and the docs agreeing with the nvcc_ccbin rule.

Real parts: a real 3 MiB tmpfs as work_root, a real `python -m venv` running out of it, the
real `invoke` command, the sshd fleet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit.errors import Sm120Error
from sm120kit.inventory.host import Host
from sm120kit.runner.pool import HostContext, Runner, RunOptions
from sm120kit.validate import check_ccbin
from tests.conftest import REPO, invoke_env, json_of, run_invoke
from tests.fleet.test_faults import tiny_work_root  # noqa: F401 - the fixture
from tests.support.fleet import Fleet


def _run_local(tmp_path: Path, work: Path, op: Any) -> Any:
    host = Host("local", vars={"ansible_connection": "local", "work_root": str(work)})
    return (
        Runner(RunOptions(run_root=str(tmp_path / "runs"))).run("disk", [host], op).hosts["local"]
    )


def test_venv_on_a_full_work_root_is_named_out_of_space(
    tmp_path: Path,
    tiny_work_root: Path,  # noqa: F811
) -> None:
    """ensurepip runs out of a 3 MiB tmpfs: its own error says only "exit status 1"."""

    def op(ctx: HostContext) -> None:
        ctx.run(f"python3 -m venv {tiny_work_root}/env", what="create the env")

    res = _run_local(tmp_path, tiny_work_root, op)
    assert res.status == "failed"
    assert res.error.startswith(f"out of disk space under {tiny_work_root} "), res.error
    assert "bytes (" in res.error and "MiB) free" in res.error
    assert "create the env" in res.error  # the step's own error is kept, after it
    assert "\n" not in res.error


def test_no_space_left_from_any_tool_is_named(
    tmp_path: Path,
    tiny_work_root: Path,  # noqa: F811
) -> None:
    def op(ctx: HostContext) -> None:
        ctx.run(
            f"mkdir -p {tiny_work_root}/deep/dir && head -c 8M /dev/zero > "
            f"{tiny_work_root}/deep/dir/blob",
            what="write a file",
        )

    res = _run_local(tmp_path, tiny_work_root, op)
    assert res.status == "failed" and "out of disk space under" in res.error, res.error
    assert str(tiny_work_root) in res.error and "No space left on device" in res.error


def test_a_failure_with_room_to_spare_says_nothing_about_disk(tmp_path: Path) -> None:
    def op(ctx: HostContext) -> None:
        ctx.run("false", what="a failing step")

    res = _run_local(tmp_path, tmp_path / "work", op)
    assert res.status == "failed" and "disk" not in res.error, res.error


def test_default_known_hosts_directory_is_refused_up_front(fleet: Fleet, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh" / "known_hosts").mkdir(parents=True)
    env = invoke_env(fleet, tmp_path, HOME=str(home))
    del env["INVOKE_SM120KIT_KNOWN_HOSTS"]
    proc = run_invoke(["facts", "-H", "gpu1", "--json"], env, timeout=120)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    doc = json_of(proc)
    assert doc["hosts"] == {}
    assert "known_hosts (the default" in doc["error"]
    assert f"{home}/.ssh/known_hosts is not a file" in doc["error"]
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "runs").glob("*/"))


def test_huge_inventory_value_is_shortened_for_people_only(tmp_path: Path) -> None:
    big = "x" * (1024 * 1024)
    inv = tmp_path / "hosts.yaml"
    doc = {
        "all": {
            "hosts": {
                "h1": {
                    "ansible_connection": "local",
                    "work_root": str(tmp_path / "w"),
                    "big": big,
                    "markup": "[/] [bold]not markup",
                }
            }
        }
    }
    inv.write_text(yaml.safe_dump(doc, width=10**9))
    env = invoke_env(None, tmp_path)
    people = run_invoke(["inventory", "-i", str(inv)], env, timeout=120)
    assert people.returncode == 0, people.stderr
    assert len(people.stdout) < 20_000, len(people.stdout)
    assert "characters; --json shows it whole" in people.stdout.replace("\n", "")
    assert "[/] [bold]not markup" in people.stdout  # shown as written, not as markup
    machine = run_invoke(["inventory", "-i", str(inv), "--json"], env, timeout=120)
    assert machine.returncode == 0
    assert json.loads(machine.stdout)["hosts"]["h1"]["vars"]["big"] == big


def test_docs_and_code_agree_on_nvcc_ccbin() -> None:
    """nvcc runs `-ccbin` through sh and a bare name would be looked up on whatever PATH it
    has: the tool takes absolute paths only, and the reference says so."""
    with pytest.raises(Sm120Error, match="must be an absolute path"):
        check_ccbin("gcc-14")
    assert check_ccbin("/usr/bin/gcc-14") == "/usr/bin/gcc-14"
    reference = (REPO / "docs" / "reference.md").read_text()
    [row] = [line for line in reference.splitlines() if line.startswith("| `nvcc_ccbin` |")]
    assert "path or `gcc-N`" not in row and "absolute path" in row
