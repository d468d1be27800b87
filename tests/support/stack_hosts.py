"""The hosts and recipes of the stack's end-to-end tests: uv's pinned wheel (fetched once per
machine, checked by sha256) in a controller release cache, r580's recipes with their [stack]
on a lock of a tiny closure drafted by the real drafting function, and an inventory of fleet
hosts (real sshd on loopback) whose GPU and driver are simulated by host vars, as a GPU-less
build box names them."""

from __future__ import annotations

import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from sm120kit.ops.stack_files import UV
from sm120kit.stack.draft import draft_lock
from sm120kit.stack.lock import dump_lock
from tests.support.fleet import Fleet
from tests.support.tiny_index import sha256_of, stack_on_lock

REPO = Path(__file__).resolve().parents[2]


#: Where the tests keep uv's pinned wheel between runs (downloaded once, checked by sha256).
UV_KEPT = Path.home() / ".cache" / "sm120kit-test" / "uv"


def kept_uv_wheel() -> Path:
    """uv's pinned wheel (`stack_files.UV`), fetched once per machine from its URL and checked
    by sha256 (the `uv_wheel` session fixture): the hosts get it from the controller's release
    cache, as a host without index access gets it from the stores."""
    path = UV_KEPT / UV.filename
    if not path.is_file() or sha256_of(path) != UV.sha256:
        UV_KEPT.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        with urllib.request.urlopen(UV.url, timeout=120) as resp, part.open("wb") as out:
            shutil.copyfileobj(resp, out)
        assert sha256_of(part) == UV.sha256
        part.replace(path)
    return path


def release_cache_with_uv(root: Path, uv_wheel: Path) -> str:
    """A controller release cache at `root` holding uv's wheel alone."""
    (root / UV.sha256).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(uv_wheel, root / UV.sha256 / UV.filename)
    return str(root)


STACK_HOST = {
    "target_driver": "580.95.05",
    "target_arch": "12.0",
}


def tiny_recipes(
    tmp: Path,
    index: Any,
    bad: str | None = None,
    edit: Callable[[str], str] | None = None,
    text: str = "",
    top: str = "demo-app==1.0",
) -> Path:
    """The repo's recipes with r580's [stack] pointing at a lock of the tiny closure (drafted
    by the real drafting function, or `text`); `bad`: a distribution whose sha256 is then
    wrong; `edit`: a change to the lock's text."""
    files, url = index
    root = tmp / "tree"
    if not root.exists():
        shutil.copytree(REPO / "recipes", root / "recipes")
        shutil.copytree(REPO / "patches", root / "patches")
    if not text:
        lock = draft_lock(
            top, python="3.11", platform="manylinux_2_34_x86_64", target=None,
            cache=tmp / "cache", index=url,
        )  # fmt: skip
        text = dump_lock(lock, ["tiny"])
    if bad:
        entry = lock.entry(bad)
        assert entry is not None
        text = text.replace(entry.sha256, "f" * 64)
    if edit:
        text = edit(text)
    return stack_on_lock(root, text, top, "tiny")


def stack_inventory(fleet: Fleet, tmp: Path, hosts: tuple[str, ...]) -> Path:
    """The fleet's inventory with `hosts` as stack hosts (simulated 12.0 GPU, r580 driver),
    each with its own work_root under `tmp`; `local` runs without SSH."""
    doc = yaml.safe_load(fleet.inventory.read_text())
    for name in hosts:
        vars_: dict[str, object] = {**STACK_HOST, "work_root": str(tmp / "work" / name)}
        if name == "local":
            vars_["provision_stack"] = True
            doc["all"]["hosts"]["local"] = {"ansible_connection": "local", **vars_}
        else:
            doc["all"]["hosts"][name].update(vars_)
    inv = tmp / "hosts.yaml"
    inv.write_text(yaml.safe_dump(doc))
    return inv
