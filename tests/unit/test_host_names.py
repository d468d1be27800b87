"""Host names are file names on the controller (issue #45 class 7): unsafe ones are refused at
inventory load, with the inventory file and the host named; `host_file` is the one helper that
joins a host name into a path. Real inventory files and the real `invoke` CLI; nothing simulated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sm120kit.errors import InventoryError
from sm120kit.inventory.host import host_file, unsafe_host_name
from sm120kit.inventory.load import load_inventory
from tests.conftest import invoke_env, run_invoke

GOOD = ["gpu-01.example.com", "host_1", "gpu1", "GPU.Example.COM", "10.0.0.1", "fe80::1", "a" * 200]
BAD = ["../../x", "..", ".", "a/b", "/etc/x", "-oProxyCommand", "x\x01y", "x\x7fy", "a" * 201]


def _inventory(tmp: Path, name: str) -> Path:
    inv = tmp / "hosts.yaml"
    doc = {"all": {"hosts": {name: {"ansible_connection": "local"}}}}
    inv.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return inv


@pytest.mark.parametrize("name", GOOD)
def test_common_names_load(tmp_path: Path, name: str) -> None:
    assert unsafe_host_name(name) is None
    inv = load_inventory(_inventory(tmp_path, name))
    assert [h.name for h in inv.select("all")] == [name]
    assert host_file(tmp_path, name, ".log").parent == tmp_path


@pytest.mark.parametrize("name", BAD)
def test_unsafe_names_are_refused_naming_file_and_host(tmp_path: Path, name: str) -> None:
    assert unsafe_host_name(name)
    inv = _inventory(tmp_path, name)
    with pytest.raises(InventoryError) as info:
        load_inventory(inv)
    message = str(info.value)
    assert "hosts.yaml" in message and "bad host name" in message
    assert "\n" not in message
    with pytest.raises(ValueError):
        host_file(tmp_path, name, ".log")


@pytest.mark.parametrize("name", ["../../escaped", "a" * 300])
def test_real_run_writes_nothing_outside_the_run_dir(tmp_path: Path, name: str) -> None:
    """The real CLI: one error line, exit 1, no traceback, and no file outside the run root."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    inv = _inventory(work, name)
    env = invoke_env(None, work)
    proc = run_invoke(["facts", "-i", str(inv), "-H", "all"], env)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "bad host name" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "hosts.yaml"]
