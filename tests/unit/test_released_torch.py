"""Which torch a kernel wheel was built for, when neither its build record, its metadata nor a
recipe pin of the host says (#46 item 6b): the shipped lock that holds that very wheel (by its
sha256) names the torch it was released beside, whatever the host's recipe or stack.

Pure tables over sm120kit/remote/extension_probe.py's `package_built_for` / `released_torch`,
then the controller's facts from the real shipped locks and catalogues
(sm120kit/packages/stack.py `catalogue_wheels`). The real-wheel path is
tests/real/test_smoke_real_wheel.py::test_the_release_torch_is_found_by_the_wheels_sha256.
"""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.packages import stack
from sm120kit.remote.extension_probe import package_built_for, released_torch

SHA = "57dfb3a2a3cd759f499c32e2bad5f6489b7c58f7f9a84ee00c53ec92d303aaab"  # sgl-kernel 0.3.21
FACTS = {"wheels": {SHA: {"source": "cat", "torch": "2.9.1", "torch_source": "locks/x/pylock"}}}
PIN_0321 = {"version": "0.3.21", "torch": "==2.9.1", "recipe": "r570"}
PIN_0410 = {"version": "0.4.10", "torch": "==2.14.1", "recipe": "r580"}


def info(**kw: Any) -> dict[str, Any]:
    return {"distribution": "sgl-kernel", "version": "0.3.21", "requires": [], **kw}


@pytest.mark.parametrize(
    ("inf", "marker", "declared", "facts", "torch", "source"),
    [
        # The host's recipe pins this version: its pin, as before.
        (info(wheel_sha256=SHA), {}, PIN_0321, FACTS, "==2.9.1", "recipe pin for sgl-kernel"),
        # The host's recipe pins another version (r580: 0.4.10): the lock holding the wheel.
        (info(wheel_sha256=SHA), {}, PIN_0410, FACTS, "==2.9.1", "locks/x/pylock: this wheel"),
        # No recipe at all.
        (info(wheel_sha256=SHA), {}, {}, FACTS, "==2.9.1", "locks/x/pylock"),
        # The sha256 from a managed env's install marker when direct_url.json has none.
        (info(), {"packages": {"sgl-kernel": {"sha256": SHA}}}, {}, FACTS, "==2.9.1", "locks/x"),
        # Metadata pins win over every catalogue.
        (
            info(wheel_sha256=SHA, requires=["torch==2.8.0"]),
            {},
            {},
            FACTS,
            "==2.8.0",
            "wheel metadata",
        ),
        # A wheel no catalogue read, or one whose lock has no torch: unknown.
        (info(wheel_sha256="0" * 64), {}, PIN_0410, FACTS, None, None),
        (info(wheel_sha256=SHA), {}, {}, {"wheels": {SHA: {"source": "cat"}}}, None, None),
        (info(), {}, {}, FACTS, None, None),
    ],
)
def test_which_torch_and_who_says_so(
    inf: dict[str, Any],
    marker: dict[str, Any],
    declared: dict[str, Any],
    facts: dict[str, Any],
    torch: str | None,
    source: str | None,
) -> None:
    got = package_built_for("sgl-kernel", inf, declared, released_torch(marker, inf, facts))
    if torch is None:
        assert got is None
        return
    assert got is not None and got["torch"] == torch
    assert str(got["source"]).startswith(str(source)), got


def test_every_shipped_catalogue_gives_its_locks_torch() -> None:
    """From the shipped locks: sgl-kernel 0.3.21's wheel beside sglang 0.5.9's torch 2.9.1,
    sglang-kernel 0.4.10's beside sglang 0.5.23's torch 2.14.1."""
    wheels = stack.catalogue_wheels(["sgl-kernel", "sglang-kernel"])
    got = {w["version"]: (w["torch"], w["torch_source"].split("/")[1]) for w in wheels.values()}
    assert got == {"0.3.21": ("2.9.1", "sglang-0.5.9"), "0.4.10": ("2.14.1", "sglang-0.5.23")}
    assert wheels[SHA]["torch_cuda"] == "12.8"
