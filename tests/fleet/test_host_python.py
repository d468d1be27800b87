"""The host's Python picks the stack's lock (sm120kit/python_choice.py): the rule as tables,
then real loopback SSH hosts whose only python3 is 3.12, 3.13 or 3.10.

Real parts: the sshd fleet, the pyenv interpreters of this machine (3.10, 3.11, 3.12, 3.13),
venv and pip in them, a PEP 503 index on 127.0.0.1 (tests/support/tiny_index.py) and the
stack install and smoke. Simulated: the GPU and driver (host vars ``target_driver`` /
``target_arch``); which Pythons a host has (its PATH holds this machine's tools minus every
python*, plus links to one pyenv interpreter); and the distribution's archive on the 3.10
hosts: ``apt-cache`` / ``apt-get`` / ``sudo`` stubs whose ``install python3.11`` links pyenv's
3.11 as ``python3.11``, and whose archive lacks 3.11 on the last host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sm120kit.errors import RecipeError
from sm120kit.python_choice import archive_has, pick_python
from sm120kit.recipes.files import load_recipes
from sm120kit.stack.lock import Lock, LockEntry, dump_lock, lock_file_name
from tests.conftest import invoke_env, json_of, run_invoke
from tests.support.fleet import Fleet
from tests.support.tiny_index import make_wheel, point_r580_at_demo, serve, sha256_of

REPO = Path(__file__).resolve().parents[2]
PYENV = Path("/root/.pyenv/versions")
PREFER = ["3.11", "3.12", "3.13"]
DEBIAN = {"id": "debian", "id_like": None, "pretty": "Debian 12"}
UBUNTU = {"id": "ubuntu", "id_like": "debian", "pretty": "Ubuntu 22.04"}
RHEL = {"id": "rocky", "id_like": "rhel centos fedora", "pretty": "Rocky 9"}


def facts(*pythons: str, os_: dict[str, Any] | None = None, user: str = "me") -> dict[str, Any]:
    return {
        "python": [{"path": f"/usr/bin/python{v}", "version": f"{v}.1"} for v in pythons],
        "os": os_ or UBUNTU,
        "user": user,
    }


@pytest.mark.parametrize(
    ("have", "locks", "want", "why"),
    [
        (["3.12"], {"3.11", "3.12", "3.13"}, "3.12", "the host has python3.12"),
        (["3.13", "3.12"], {"3.11", "3.12", "3.13"}, "3.12", "it has no python3.11"),
        (["3.11", "3.13"], {"3.11", "3.12", "3.13"}, "3.11", "recipe's order (3.11, 3.12, 3.13)"),
        (["3.11", "3.12"], {"3.12"}, "3.12", "the first with a lock"),
        (["3.10", "3.13"], None, "3.13", "the first of the recipe"),
    ],
)
def test_the_host_python_and_the_recipe_order_pick(
    have: list[str], locks: set[str] | None, want: str, why: str
) -> None:
    got = pick_python(facts(*have), PREFER, locks)
    assert (got.version, got.path, got.install, got.refusal) == (
        want,
        f"/usr/bin/python{want}",
        [],
        None,
    )
    assert why in got.why


@pytest.mark.parametrize(
    ("os_", "archive", "user", "install"),
    [
        (
            UBUNTU,
            {"python3.11", "python3.11-venv", "python3.12"},
            "me",
            [
                "sudo -n apt-get update",
                "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y "
                "--no-install-recommends python3.11 python3.11-venv",
            ],
        ),
        (
            DEBIAN,
            {"python3.12", "python3.12-venv"},  # no 3.11: the next in order
            "root",
            [
                "apt-get update",
                "env DEBIAN_FRONTEND=noninteractive apt-get install -y "
                "--no-install-recommends python3.12 python3.12-venv",
            ],
        ),
        (RHEL, {"python3.12"}, "me", ["sudo -n dnf install -y python3.12"]),
    ],
)
def test_a_host_without_them_gets_the_distributions_package(
    os_: dict[str, Any], archive: set[str], user: str, install: list[str]
) -> None:
    f = facts("3.10", os_=os_, user=user)
    sudo = "" if user == "root" else "sudo -n "
    first = pick_python(f, PREFER, {"3.11", "3.12", "3.13"}, sudo=sudo)
    assert first.version is None and first.query and first.refusal is None  # look it up first
    got = pick_python(f, PREFER, {"3.11", "3.12", "3.13"}, archive=archive, sudo=sudo)
    assert got.install == install and got.refusal is None
    assert got.path == f"/usr/bin/python{got.version}" and "archive has" in got.why


@pytest.mark.parametrize(
    ("f", "locks", "archive", "line"),
    [
        (
            facts("3.10"),
            {"3.11"},
            set(),
            "the recipe wants Python 3.11 but the host has 3.10 (/usr/bin/python3.10), and "
            "Ubuntu 22.04's apt archive has no python3.11 + python3.11-venv: install one of "
            "them with its venv module",
        ),
        (
            facts("3.10", os_={"id": "arch", "pretty": "Arch Linux"}),
            {"3.11", "3.12"},
            None,
            "the recipe wants Python 3.11 or 3.12 but the host has 3.10 (/usr/bin/python3.10); "
            "install python3.11 with its venv module (Arch Linux: no apt or dnf known here)",
        ),
        (
            facts("3.12"),
            {"3.9"},
            None,
            "the recipe wants Python 3.11 or 3.12 or 3.13 but its stack has locks for 3.9 only: "
            "set recipe.python to one of 3.9",
        ),
    ],
)
def test_otherwise_one_line_names_what_to_install(
    f: dict[str, Any], locks: set[str], archive: set[str] | None, line: str
) -> None:
    got = pick_python(f, PREFER, locks, archive=archive)
    assert got.refusal == line and got.version is None and not got.install


def test_the_archive_lookups_are_read_as_apt_and_dnf_print_them() -> None:
    apt = (
        "python3.11:\n  Installed: (none)\n  Candidate: 3.11.0~rc1-1~22.04\n  Version table:\n"
        "python3.11-venv:\n  Installed: (none)\n  Candidate: 3.11.0~rc1-1~22.04\n"
        "python3.12:\n  Installed: (none)\n  Candidate: (none)\n"
    )
    assert archive_has("apt", apt) == {"python3.11", "python3.11-venv"}
    dnf = "Available Packages\nName         : python3.11\nVersion      : 3.11.9\n"
    assert archive_has("dnf", dnf) == {"python3.11"}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"3.11"', None),
        ('["3.12", "3.11"]', None),
        ('["3.10"]', "none for the recipe's 3.10"),
        ("[]", "expected a Python X.Y or a non-empty list"),
        ('["3.11", "3.11"]', "3.11 listed more than once"),
        ('["3.11", "3"]', "expected a Python X.Y like '3.11', got '3'"),
        ("3.11", "write 3.11 as a quoted string"),
    ],
)
def test_the_recipe_python_is_one_or_an_ordered_list(
    tmp_path: Path, value: str, problem: str | None
) -> None:
    folder = tmp_path / "recipes"
    folder.mkdir()
    text = (REPO / "recipes" / "r580.toml").read_text()
    text = text.replace('python = ["3.11", "3.12", "3.13"]', f"python = {value}", 1)
    (folder / "r580.toml").write_text(text)
    if problem is None:
        recipe = load_recipes(folder, patches_dir=REPO / "patches")["r580"]
        want = yaml.safe_load(value)
        want = [want] if isinstance(want, str) else want
        assert list(recipe.pythons) == want and recipe.python == want[0]
        assert recipe.lock is not None and recipe.lock.python == want[0]  # the first locked
        return
    with pytest.raises(RecipeError) as err:
        load_recipes(folder, patches_dir=REPO / "patches")
    line = str(err.value)
    assert "\n" not in line and "r580.toml" in line and "python" in line and problem in line


# --- real hosts ----------------------------------------------------------------------------

APT_CACHE = """#!/bin/sh
# Simulated archive: python3.11 and python3.11-venv have a candidate when HAS is 1.
[ "$1" = policy ] || exit 1
shift
for p in "$@"; do
  c="(none)"
  case "$p" in python3.11|python3.11-venv) [ {has} = 1 ] && c="3.11.7-1" ;; esac
  printf '%s:\\n  Installed: (none)\\n  Candidate: %s\\n' "$p" "$c"
done
"""
APT_GET = """#!/bin/sh
# Simulated install: python3.11 is this machine's pyenv 3.11, linked into the host's PATH.
echo "apt-get $*" >> {log}
case "$*" in *install*python3.11*) ln -sf {py311} {bin}/python3.11 ;; esac
"""
SUDO = """#!/bin/sh
# Simulated sudo: drop its options, run the command as this user.
while [ "${{1#-}}" != "$1" ]; do [ "$1" = -p ] && shift; shift; done
exec "$@"
"""


def _interpreter(version: str) -> Path:
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    if not found:
        pytest.skip(f"needs pyenv's Python {version} under {PYENV}")
    return found[-1]


class PythonFleet(Fleet):
    """Loopback hosts whose PATH holds this machine's tools without any python*, plus links
    to one pyenv interpreter named python3 and python3.X."""

    PYTHONS = {"p312": "3.12", "p313": "3.13", "p310": "3.10", "p310x": "3.10"}

    def _prepare(self, h: Any) -> None:
        super()._prepare(h)
        tools = self.root / "tools"
        if not tools.exists():
            tools.mkdir()
            for d in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"):
                for entry in sorted(Path(d).iterdir()) if Path(d).is_dir() else []:
                    link = tools / entry.name
                    if not entry.name.startswith("python") and not link.exists():
                        link.symlink_to(entry)
        version = self.PYTHONS[h.name]
        py = _interpreter(version)
        for name in ("python3", f"python{version}"):
            (h.root / "bin" / name).symlink_to(py)
        if version == "3.10":
            stubs = {
                "apt-cache": APT_CACHE.format(has=0 if h.name == "p310x" else 1),
                "apt-get": APT_GET.format(
                    log=h.root / "apt.log", py311=_interpreter("3.11"), bin=h.root / "bin"
                ),
                "sudo": SUDO,
            }
            for name, text in stubs.items():
                (h.root / "bin" / name).write_text(text)
                (h.root / "bin" / name).chmod(0o755)
        config = h.root / "sshd_config"
        lines = config.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("SetEnv "):
                words = [w for w in line.split() if not w.startswith("PATH=")]
                lines[i] = " ".join([*words, f"PATH={h.root / 'bin'}:{tools}"])
        config.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def pyfleet(tmp_path_factory: pytest.TempPathFactory) -> Any:
    hosts = [(n, f"127.0.0.{31 + i}", "nogpu") for i, n in enumerate(PythonFleet.PYTHONS)]
    f = PythonFleet(tmp_path_factory.mktemp("pyfleet"), hosts).start()
    yield f
    f.stop()


def _tiny_stack(tmp: Path, url: str, files: Path) -> Path:
    """The repo's recipes with r580's [stack] pointing at locks of two pure wheels, one per
    Python 3.11, 3.12 and 3.13 (the same files: pure wheels serve any Python)."""
    root = tmp / "tree"
    shutil.copytree(REPO / "recipes", root / "recipes")
    shutil.copytree(REPO / "patches", root / "patches")
    base = url.replace("/simple", "/files/")
    entries = tuple(
        LockEntry(w.name.split("-")[0].replace("_", "-"), w.name.split("-")[1], w.name,
                  base + w.name, sha256_of(w), "release", False)
        for w in sorted(files.glob("*.whl"))
    )  # fmt: skip
    (root / "locks" / "demo").mkdir(parents=True)
    for py in PREFER:
        lock = Lock(
            Path("x"),
            "demo-app==1.0",
            py,
            "manylinux_2_34_x86_64",
            "",
            "",
            "test",
            "2026-12-03",
            entries,
        )
        name = lock_file_name(py, "manylinux_2_34_x86_64")
        (root / "locks" / "demo" / name).write_text(dump_lock(lock, ["tiny"]))
    return point_r580_at_demo(root, "demo-app==1.0", "tiny")


def test_each_host_python_provisions_its_lock_over_ssh(pyfleet: Fleet, tmp_path: Path) -> None:
    """plan then provision on four hosts at once: python3.12 only, python3.13 only, 3.10 with
    an archive that has python3.11, 3.10 with one that has not."""
    files = tmp_path / "wheels"
    files.mkdir()
    make_wheel(files, "demo-app", "1.0", requires=("demo-lib==2.0",))
    make_wheel(files, "demo-lib", "2.0")
    doc = yaml.safe_load(pyfleet.inventory.read_text())
    for name in PythonFleet.PYTHONS:
        doc["all"]["hosts"][name].update(
            target_driver="580.95.05", target_arch="12.0", provision_stack=True
        )
    inv = tmp_path / "hosts.yaml"
    inv.write_text(yaml.safe_dump(doc))
    hosts = ",".join(PythonFleet.PYTHONS)
    with serve(files) as url:
        recipes = _tiny_stack(tmp_path, url, files)
        env = invoke_env(pyfleet, tmp_path, INVOKE_SM120KIT_RECIPES_DIR=str(recipes))
        plan = run_invoke(["plan", "-H", hosts, "-i", str(inv), "--json"], env)
        assert "hosts" in json_of(plan), plan.stdout[-3000:] + plan.stderr[-3000:]
        got = json_of(plan)["hosts"]
        assert set(got) == set(PythonFleet.PYTHONS), plan.stdout[-3000:] + plan.stderr[-3000:]
        for name, py in (("p312", "3.12"), ("p313", "3.13")):
            step = next(s for s in got[name]["steps"] if s["name"] == "python")
            assert step["status"] == "ok", step
            assert step["message"].startswith(
                f"Python {py}: lock pylock.cp{py.replace('.', '')}-manylinux_2_34_x86_64.toml, "
            ), step
            assert f"the host has python{py}" in step["message"]
        step = next(s for s in got["p310"]["steps"] if s["name"] == "python")
        assert step["status"] == "changed" and "apt archive has python3.11 and " in step["message"]
        assert step["commands"][-1].endswith("apt-get install -y --no-install-recommends "
                                             "python3.11 python3.11-venv")  # fmt: skip
        assert not (pyfleet.root / "p310" / "bin" / "python3.11").exists()  # plan changed nothing
        refused = got["p310x"]
        assert refused["status"] == "failed" and "\n" not in refused["error"]
        assert refused["error"].startswith("p310x: the recipe wants Python 3.11 or 3.12 or 3.13")
        assert "apt archive has no python3.11 + python3.11-venv" in refused["error"]

        run = run_invoke(["provision", "-H", hosts, "-i", str(inv), "--json"], env)
    assert run.returncode == 2, run.stdout + run.stderr  # p310x fails, alone
    got = json_of(run)["hosts"]
    for name, py in (("p312", "3.12"), ("p313", "3.13"), ("p310", "3.11")):
        host = got[name]
        assert host["status"] != "failed", host.get("error")
        steps = {s["name"]: s for s in host["steps"]}
        assert steps["stack"]["status"] == "changed"
        assert steps["stack smoke"]["status"] == "ok", steps["stack smoke"]
        stack = host["stack"]
        assert stack["lock"].endswith(f"pylock.cp{py.replace('.', '')}-manylinux_2_34_x86_64.toml")
        out = subprocess.run(
            [os.path.join(stack["env"], "bin", "python"), "-c",
             "import sys, demo_app; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert out.stdout.strip() == py  # the env was made with that host's interpreter
    assert got["p310"]["python"]["version"] == "3.11"
    assert (
        "install -y --no-install-recommends python3.11 python3.11-venv"
        in (pyfleet.root / "p310" / "apt.log").read_text()
    )
    assert got["p310x"]["status"] == "failed" and "python3.11-venv" in got["p310x"]["error"]
