"""A host whose Pythons have no lock (#46 item 5): the shipped r580 stack locks 3.11 and 3.12;
a host with only python3.13 is told why (the locks' one-wheel-per-Python distributions, read
from the lock files) and what the python step will do (a root install of the distribution's
python3.11, said as such), and ``allow_system_python: false`` / ``--no-system-python`` refuse
that install in one line. A recipe forced to 3.13 is told a command that works.

Pure tables over sm120kit/python_choice.py, then a real loopback sshd host whose PATH holds
only pyenv's 3.13 (tests/fleet/test_host_python.py's PythonFleet) planned with the real recipes and
locks. Simulated: the GPU (host vars target_driver / target_arch) and the apt archive
(``apt-cache`` / ``apt-get`` / ``sudo`` stubs whose archive has python3.11).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit.python_choice import no_lock_reason, pick_python
from sm120kit.recipes.select import load_recipes
from tests.conftest import invoke_env, json_of, run_invoke
from tests.fleet.test_host_python import APT_CACHE, APT_GET, SUDO, PythonFleet, _interpreter, facts

REPO = Path(__file__).resolve().parents[2]
R580 = load_recipes(REPO / "recipes")["r580"]
WHY = no_lock_reason(R580.locks, "3.13", "locks/sglang-0.5.23")
DRAFT = "invoke lock.draft --top sglang==0.5.23 --recipe r580"
ARCHIVE = {"python3.11", "python3.11-venv"}


def test_why_a_python_has_no_lock_is_read_from_the_locks() -> None:
    assert sorted(R580.locks) == ["3.11", "3.12"]
    assert WHY.startswith(
        "no lock for Python 3.13: locks/sglang-0.5.23 has locks for 3.11 and 3.12 only, and "
    )
    # The top and torch first: the wheels a 3.13 env needs and no lock here pins.
    assert "ship one wheel per Python (sglang 0.5.23, torch 2.14.1, " in WHY
    assert "cp312 wheels in pylock.cp312-manylinux_2_34_x86_64.toml" in WHY
    assert WHY.endswith("a 3.13 env needs cp313 wheels of them, which no lock here pins")


@pytest.mark.parametrize(
    ("allow", "sudo", "install", "refusal"),
    [
        (True, "", ["apt-get update"], None),
        (True, "sudo -n ", ["sudo -n apt-get update"], None),
        (False, "", [], "installing the distribution's python3.11 as root is refused"),
    ],
)
def test_a_host_with_only_3_13(
    allow: bool, sudo: str, install: list[str], refusal: str | None
) -> None:
    got = pick_python(
        facts("3.13"),
        ["3.11", "3.12", "3.13"],
        set(R580.locks),
        archive=ARCHIVE,
        sudo=sudo,
        unlocked={"3.13": WHY},
        allow_system=allow,
        draft=DRAFT,
    )
    if refusal is None:
        assert got.version == "3.11" and got.install[:1] == install
        assert WHY in got.why  # why its own Python does not serve
        root = "as root" + (" (sudo -n)" if sudo else "")
        assert f"the step installs them {root}, a system package" in got.why
        assert "allow_system_python: false refuses it" in got.why
        return
    assert got.version is None and not got.install and got.refusal is not None
    assert "\n" not in got.refusal and refusal in got.refusal and WHY in got.refusal
    assert "(host var allow_system_python: false, or --no-system-python)" in got.refusal
    assert got.refusal.endswith(f"or a lock for the host's Python: {DRAFT}")


def test_a_recipe_forced_to_3_13_names_a_command_that_works() -> None:
    got = pick_python(facts("3.13"), ["3.13"], set(R580.locks), unlocked={"3.13": WHY}, draft=DRAFT)
    assert got.refusal == (
        f"the recipe wants Python 3.13 but its stack has locks for 3.11, 3.12 only ({WHY}): "
        f"set recipe.python to one of 3.11, 3.12, or draft the locks again where the index "
        f"has the wheels: {DRAFT}"
    )


class Only313(PythonFleet):
    """One loopback host whose only Python is pyenv's 3.13, with an apt archive offering
    python3.11 (PythonFleet's stubs)."""

    PYTHONS = {"only313": "3.13"}

    def _prepare(self, h: Any) -> None:
        super()._prepare(h)
        stubs = {
            "apt-cache": APT_CACHE.format(has=1),
            "apt-get": APT_GET.format(
                log=h.root / "apt.log", py311=_interpreter("3.11"), bin=h.root / "bin"
            ),
            "sudo": SUDO,
        }
        for name, text in stubs.items():
            (h.root / "bin" / name).write_text(text)
            (h.root / "bin" / name).chmod(0o755)


@pytest.fixture(scope="module")
def only313(tmp_path_factory: pytest.TempPathFactory) -> Any:
    f = Only313(tmp_path_factory.mktemp("only313"), [("only313", "127.0.0.81", "nogpu")]).start()
    yield f
    f.stop()


def _plan(fleet: Any, tmp: Path, extra_vars: dict[str, Any], *flags: str) -> dict[str, Any]:
    doc = yaml.safe_load(fleet.inventory.read_text())
    doc["all"]["hosts"]["only313"].update(
        target_driver="580.95.05", target_arch="12.0", **extra_vars
    )
    inv = tmp / "hosts.yaml"
    inv.write_text(yaml.safe_dump(doc))
    proc = run_invoke(
        ["plan", "-H", "only313", "-i", str(inv), "--json", *flags], invoke_env(fleet, tmp)
    )
    host: dict[str, Any] = json_of(proc)["hosts"]["only313"]
    return host


def test_plan_on_a_real_3_13_host(only313: Any, tmp_path: Path) -> None:
    host = _plan(only313, tmp_path, {})
    step = next(s for s in host["steps"] if s["name"] == "python")
    assert step["status"] == "changed", step
    msg = step["message"]
    assert msg.startswith(
        "would install Python 3.11 (lock pylock.cp311-manylinux_2_34_x86_64.toml"
    ), msg
    assert "it has 3.13 (" in msg and WHY in msg
    assert "the step installs them as root, a system package" in msg
    assert step["commands"][-1].endswith(
        "apt-get install -y --no-install-recommends python3.11 python3.11-venv"
    )
    assert not (only313.root / "only313" / "bin" / "python3.11").exists()  # plan changed nothing

    for extra, flags in (({"allow_system_python": False}, ()), ({}, ("--no-system-python",))):
        refused = _plan(only313, tmp_path, extra, *flags)
        assert refused["status"] == "failed" and "\n" not in refused["error"], refused
        assert "installing the distribution's python3.11 as root is refused" in refused["error"]
        assert WHY in refused["error"] and refused["error"].endswith(DRAFT)

    # A value that is no boolean is refused when the inventory is read, naming file and line.
    doc = yaml.safe_load(only313.inventory.read_text())
    doc["all"]["hosts"]["only313"]["allow_system_python"] = "no"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(doc))
    argv = ["plan", "-H", "only313", "-i", str(tmp_path / "bad.yaml"), "--json"]
    proc = run_invoke(argv, invoke_env(only313, tmp_path))
    assert proc.returncode == 1
    assert json_of(proc)["error"].endswith(
        "all.hosts.only313.allow_system_python: host only313: allow_system_python must be true "
        "or false, got str 'no'"
    )

    forced = _plan(only313, tmp_path, {"recipe.python": "3.13"})
    assert forced["status"] == "failed" and forced["error"].endswith(DRAFT), forced
    # The hint's command is one lock.draft takes: with the index out of reach here it stops at
    # the index (a connection problem named), not at its flags or the recipe.
    dead = "http://127.0.0.1:9/simple"
    proc = run_invoke([*DRAFT.split()[1:], "--index", dead, "--json"], invoke_env(None, tmp_path))
    assert proc.returncode == 1
    err = json_of(proc)["error"]
    assert "127.0.0.1:9" in err and "--top is required" not in err and "no such recipe" not in err
