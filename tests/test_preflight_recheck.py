"""lock.draft re-checks preflight's hand-written rules against a new release
(sm120kit/preflight/recheck.py): table tests of the pure function over the real shipped
catalogue of sglang 0.5.23 and catalogues built in the test (a release whose module gained
12.0 code, or lost the module), nothing simulated beyond those facts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sm120kit.packages.stack import catalogues
from sm120kit.preflight.recheck import recheck_rule, recheck_rules
from sm120kit.preflight.rules import RULES
from sm120kit.stack.catalogue import Catalogue, ModuleFacts, ReleaseFacts, WheelFacts

FA3 = next(r for r in RULES if r.id == "fa3-no-sm120")
LOCKED = {"sglang": "0.5.23", "sglang-kernel": "0.4.10", "sgl-flash-mla": "1.0.0"}


def _shipped() -> Catalogue:
    return next(c for c in catalogues() if "sglang-0.5.23" in c.source)


def _kernel(*mods: ModuleFacts, version: str = "0.4.11") -> Catalogue:
    wheel = WheelFacts(version, f"sglang_kernel-{version}.whl", "0" * 64, mods)
    return Catalogue((ReleaseFacts("sglang-kernel", (version,), (wheel,)),))


def test_the_shipped_release_flags_no_rule() -> None:
    assert recheck_rules(LOCKED, _shipped()) == []


@pytest.mark.parametrize(
    ("versions", "cat", "expected"),
    [
        # Same facts, newer versions: outside every range the rule was verified for.
        (
            {"sglang": "0.5.24", "sglang-kernel": "0.4.11"},
            _kernel(ModuleFacts("sgl_kernel/flash_ops.abi3.so", sass=("sm_80", "sm_90a"))),
            ["verified for sglang==0.5.23, sglang-kernel==0.4.10, sgl-kernel==0.3.21; the "
             "release locks sglang 0.5.24, sglang-kernel 0.4.11: re-read its source"],
        ),
        # The cited module now has 12.0 code: the wheel wins.
        (
            {"sglang": "0.5.23", "sglang-kernel": "0.4.11"},
            _kernel(ModuleFacts("sgl_kernel/flash_ops.abi3.so", sass=("sm_90a", "sm_120a"))),
            ["cites sgl_kernel/flash_ops.abi3.so, which now has code for 12.0 in sglang-kernel "
             "0.4.11 (sm_90a, sm_120a; catalogue): the wheel wins, drop or narrow the rule"],
        ),
        # The cited module is gone.
        (
            {"sglang": "0.5.23", "sglang-kernel": "0.4.11"},
            _kernel(ModuleFacts("sgl_kernel/common_ops.abi3.so", sass=("sm_120a",))),
            ["cites sgl_kernel/flash_ops.*, no longer in sglang-kernel 0.4.11 (catalogue)"],
        ),
        # The old name finds the facts (aliases), and the distribution can be missing.
        (
            {"sglang": "0.5.23"},
            None,
            ["cites sgl_kernel/flash_ops.* of sglang-kernel, which the release lacks"],
        ),
    ],
)  # fmt: skip
def test_recheck_fa3(versions: dict[str, str], cat: Catalogue | None, expected: list[str]) -> None:
    assert [f.reason for f in recheck_rule(FA3, versions, cat)] == expected


def test_a_version_the_catalogue_did_not_read_is_flagged_unknown() -> None:
    flags = recheck_rule(FA3, {"sglang": "0.5.23", "sglang-kernel": "0.4.12"}, _kernel())
    assert [f.line() for f in flags] == [
        "rule fa3-no-sm120: cites sgl_kernel/flash_ops.*: sglang-kernel 0.4.12: unknown "
        "(versions read: 0.4.11)"
    ]


def test_rules_for_other_majors_are_not_rechecked_for_this_arch() -> None:
    other = replace(FA3, id="x", majors=(9,))
    assert recheck_rules({"sglang": "0.6.0"}, None, ("12.0",), (other,)) == []
    assert [f.rule for f in recheck_rules({"sglang": "0.6.0"}, None, ("9.0",), (other,))] == [
        "x",
        "x",
    ]
    # A release without any distribution the rule was read in is not one it is about.
    assert recheck_rules({"torch": "2.14.1"}, None) == []


def test_the_older_shipped_release_flags_the_rules_read_in_a_newer_one() -> None:
    """sglang 0.5.9's real lock and catalogue: every rule read in 0.5.10+ is flagged, and
    flashmla's cited sgl-flash-mla is not in that release; fa3's sgl-kernel 0.3.21 is in range."""
    from pathlib import Path

    from sm120kit.stack.lock import load_lock

    root = Path(__file__).resolve().parents[1]
    lock = load_lock(root / "locks/sglang-0.5.9/pylock.cp311-manylinux_2_34_x86_64.toml")
    cat = next(c for c in catalogues() if "sglang-0.5.9" in c.source)
    flags = recheck_rules({e.name: e.version for e in lock.packages}, cat)
    assert "fa3-no-sm120" not in {f.rule for f in flags}
    assert (
        "rule flashmla-no-sm120: cites flash_mla/* of sgl-flash-mla, which the release lacks"
        in {f.line() for f in flags}
    )
    assert {f.rule for f in flags} >= {"deep-gemm-sm120", "trtllm-mha-fp8-kv-sm120"}
