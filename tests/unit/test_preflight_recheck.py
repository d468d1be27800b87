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
from sm120kit.stack.catalogue import ArchGate, Catalogue, ModuleFacts, ReleaseFacts, WheelFacts

FA3 = next(r for r in RULES if r.id == "fa3-no-sm120")
DEEP_GEMM = next(r for r in RULES if r.id == "deep-gemm-sm120")
LOCKED = {"sglang": "0.5.23", "sglang-kernel": "0.4.10", "sgl-flash-mla": "1.0.0"}


#: Every version of every installed distribution the rule names must be in its range.
OUT_0411 = (
    "verified for sglang==0.5.23, sglang-kernel==0.4.10, sgl-kernel==0.3.21; the release "
    "locks sglang-kernel 0.4.11 (outside ==0.4.10): re-read its source"
)


def _shipped() -> Catalogue:
    return next(c for c in catalogues() if "sglang-0.5.23" in c.source)


def _kernel(*mods: ModuleFacts, version: str = "0.4.11") -> Catalogue:
    wheel = WheelFacts(version, f"sglang_kernel-{version}.whl", "0" * 64, mods)
    return Catalogue((ReleaseFacts("sglang-kernel", (version,), (wheel,)),))


def test_the_shipped_release_flags_only_the_rule_its_files_disprove() -> None:
    """sglang 0.5.23's real lock and catalogue: deep-gemm-sm120, narrowed below 0.5.23, is
    outside its range there, and the release's sgl-deep-gemm 0.2.3.post2 ships SM120
    kernel sources (read from its wheel into the catalogue) that disprove it."""
    from pathlib import Path

    from sm120kit.stack.lock import load_lock

    root = Path(__file__).resolve().parents[2]
    lock = load_lock(root / "locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml")
    flags = recheck_rules({e.name: e.version for e in lock.packages}, _shipped())
    assert {f.rule for f in flags} == {"deep-gemm-sm120"}
    reasons = [f.reason for f in flags]
    assert reasons[0] == (
        "verified for sglang>=0.5.10,<0.5.23; the release locks sglang 0.5.23 (outside "
        ">=0.5.10,<0.5.23): re-read its source"
    )
    assert "sgl-deep-gemm 0.2.3.post2 ships kernel sources for 12.0" in reasons[1]
    assert "deep_gemm/include/deep_gemm/impls/sm*_*" in reasons[1]


def test_a_rule_the_release_files_disprove_is_flagged() -> None:
    """The rule as it was before (verified for every sglang >= 0.5.10, so 0.5.23 is inside):
    the real 0.5.23 catalogue's facts of sgl-deep-gemm 0.2.3.post2 disprove its premise."""
    old = replace(DEEP_GEMM, versions=(("sglang", ">=0.5.10"),))
    locked = {"sglang": "0.5.23", "sgl-deep-gemm": "0.2.3.post2"}
    flags = recheck_rule(old, locked, _shipped())
    assert len(flags) == 1 and "disprove the rule's premise" in flags[0].reason
    assert "sm120_* 9" in flags[0].reason
    # Without the package in the release there is nothing to disprove it with.
    assert [f.reason for f in recheck_rule(old, {"sglang": "0.5.23"}, _shipped())] == [
        "cites deep_gemm/* of sgl-deep-gemm, which the release lacks"
    ]


def _jit(*archs: str, version: str = "0.2.4") -> Catalogue:
    """A JIT package (no device code in its module) with per-arch kernel sources."""
    gates = tuple(
        ArchGate(
            f"deep_gemm/include/deep_gemm/impls{i}:sm*_*",
            "kernel_sources",
            (a,),
            f"deep_gemm/include/deep_gemm/impls{i}/sm*_*",
            f"per-arch kernel sources: sm{a.replace('.', '')}_* 1",
        )
        for i, a in enumerate(archs)
    )
    wheel = WheelFacts(version, "w.whl", "0" * 64, (ModuleFacts("deep_gemm/_C.so"),))
    return Catalogue((ReleaseFacts("sgl-deep-gemm", (version,), (wheel,), arch_gates=gates),))


@pytest.mark.parametrize(
    ("archs", "arch", "disproved"),
    [
        (("9.0", "10.0"), "12.0", False),
        (("9.0", "10.0", "12.0"), "12.0", True),
        (("12.0",), "12.1", False),
        ((), "12.0", False),
    ],
)
def test_kernel_sources_disprove_a_no_kernel_premise(
    archs: tuple[str, ...], arch: str, disproved: bool
) -> None:
    rule = replace(DEEP_GEMM, versions=(("sgl-deep-gemm", ">=0.2,<1"),))
    flags = recheck_rule(rule, {"sgl-deep-gemm": "0.2.4"}, _jit(*archs), arch)
    assert bool(flags) is disproved


@pytest.mark.parametrize(
    ("versions", "cat", "expected"),
    [
        # Same facts, newer versions: outside every range the rule was verified for.
        (
            {"sglang": "0.5.24", "sglang-kernel": "0.4.11"},
            _kernel(ModuleFacts("sgl_kernel/flash_ops.abi3.so", sass=("sm_80", "sm_90a"))),
            ["verified for sglang==0.5.23, sglang-kernel==0.4.10, sgl-kernel==0.3.21; the "
             "release locks sglang 0.5.24 (outside ==0.5.23), sglang-kernel 0.4.11 (outside "
             "==0.4.10): re-read its source"],
        ),
        # The cited module now has 12.0 code: the wheel wins.
        (
            {"sglang": "0.5.23", "sglang-kernel": "0.4.11"},
            _kernel(ModuleFacts("sgl_kernel/flash_ops.abi3.so", sass=("sm_90a", "sm_120a"))),
            [OUT_0411,
             "cites sgl_kernel/flash_ops.abi3.so, which now has code for 12.0 in sglang-kernel "
             "0.4.11 (sm_90a, sm_120a; catalogue): the wheel wins, drop or narrow the rule"],
        ),
        # The cited module is gone.
        (
            {"sglang": "0.5.23", "sglang-kernel": "0.4.11"},
            _kernel(ModuleFacts("sgl_kernel/common_ops.abi3.so", sass=("sm_120a",))),
            [OUT_0411,
             "cites sgl_kernel/flash_ops.*, no longer in sglang-kernel 0.4.11 (catalogue)"],
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
    assert [f.line() for f in flags][1:] == [
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
    """sglang 0.5.9's real lock and catalogue: every rule is flagged (each was verified with
    sglang 0.5.10 or later; fa3's sgl-kernel 0.3.21 is in range, its sglang part is not), and
    flashmla's cited sgl-flash-mla is not in that release."""
    from pathlib import Path

    from sm120kit.stack.lock import load_lock

    root = Path(__file__).resolve().parents[2]
    lock = load_lock(root / "locks/sglang-0.5.9/pylock.cp311-manylinux_2_34_x86_64.toml")
    cat = next(c for c in catalogues() if "sglang-0.5.9" in c.source)
    flags = recheck_rules({e.name: e.version for e in lock.packages}, cat)
    assert (
        "rule fa3-no-sm120: verified for sglang==0.5.23, sglang-kernel==0.4.10, "
        "sgl-kernel==0.3.21; the release locks sglang 0.5.9 (outside ==0.5.23): re-read its "
        "source" in {f.line() for f in flags}
    )
    assert (
        "rule flashmla-no-sm120: cites flash_mla/* of sgl-flash-mla, which the release lacks"
        in {f.line() for f in flags}
    )
    assert {f.rule for f in flags} >= {"deep-gemm-sm120", "trtllm-mha-fp8-kv-sm120"}


@pytest.mark.parametrize(
    ("versions", "inside", "words"),
    [
        ({"sglang": "0.5.23"}, True, "applies to sglang 0.5.23"),
        ({"sglang": "0.5.23+cu130"}, True, "applies to sglang 0.5.23+cu130"),
        ({"sglang": "0.5.23", "sglang-kernel": "0.4.10"}, True, "applies to sglang 0.5.23, "),
        ({"sglang": "0.5.24rc1"}, False, "sglang 0.5.24rc1 (outside ==0.5.23)"),
        ({"sglang": "0.5.23", "sglang-kernel": "0.5.0"}, False, "sglang-kernel 0.5.0 (outside"),
        ({"sglang": "not-a-version"}, False, "(outside ==0.5.23)"),
        ({"torch": "2.14.1"}, False, "none of sglang, sglang-kernel, sgl-kernel is installed"),
    ],
)
def test_rule_scope_is_every_named_installed_version_inside(
    versions: dict[str, str], inside: bool, words: str
) -> None:
    got, why = FA3.scope(versions)
    assert got is inside and words in why


def test_every_rule_range_is_a_pep440_specifier_closed_above() -> None:
    """A range open above would claim versions nobody read: each has an upper bound, so a
    newer release falls outside and lock.draft asks for the source to be re-read."""
    from packaging.specifiers import SpecifierSet

    for rule in RULES:
        for dist, spec in rule.versions:
            ops = {s.operator for s in SpecifierSet(spec)}
            assert ops & {"==", "<", "<=", "~=", "==="}, f"{rule.id}: {dist}{spec} is open above"
    with pytest.raises(ValueError, match="not a PEP 440 specifier set"):
        replace(FA3, versions=(("sglang", "0.5.23"),))


@pytest.mark.parametrize(
    ("versions", "status", "words"),
    [
        # Inside the verified range, nothing disproving it installed: the rule refuses.
        ({"sglang": "0.5.15"}, "fail", "applies to sglang 0.5.15"),
        # sglang 0.5.23 is outside it: a warning saying why, not applied.
        ({"sglang": "0.5.23"}, "warn", "(outside >=0.5.10,<0.5.23): not applied outside"),
        # In range, but the installed sgl-deep-gemm's files (the real 0.5.23 catalogue's facts)
        # ship SM120 kernels: a warning, not applied.
        (
            {"sglang": "0.5.15", "sgl-deep-gemm": "0.2.3.post2"},
            "warn",
            "not applied: cites deep_gemm/*, and sgl-deep-gemm 0.2.3.post2 ships kernel "
            "sources for 12.0",
        ),
    ],
)
def test_preflight_applies_a_rule_only_in_range_and_undisproved(
    versions: dict[str, str], status: str, words: str
) -> None:
    from sm120kit.preflight.launch import parse_launch
    from sm120kit.preflight.verdicts import attention_phases, rule_checks

    launch = parse_launch(
        ["sglang", "serve", "--model-path", "m", "--moe-runner-backend", "deep_gemm"]
    )
    phases = attention_phases(launch, None)
    (got,) = rule_checks(launch, phases, (12, 0), dict(versions), (DEEP_GEMM,), [_shipped()])
    assert got["status"] == status and words in got["reason"], got["reason"]
