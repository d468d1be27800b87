"""The one Arch type (sm120kit/remote/lib/arch.py): every spelling the tool accepts parses to
the same arch, and each consumer's rendering comes from it."""

from __future__ import annotations

import re

import pytest

from sm120kit.remote.lib.arch import Arch, parse_list


@pytest.mark.parametrize(
    ("spelling", "want"),
    [
        ("12.0", Arch(12, 0)),
        ("12.0a", Arch(12, 0, "a")),
        ("12.0f", Arch(12, 0, "f")),
        ("12.0+PTX", Arch(12, 0, "", True)),
        ("12.0a+ptx", Arch(12, 0, "a", True)),
        ("120", Arch(12, 0)),
        ("120a", Arch(12, 0, "a")),
        ("sm_120a", Arch(12, 0, "a")),
        ("SM_86", Arch(8, 6)),
        ("compute_120f", Arch(12, 0, "f", True)),
        (" 9.0 ", Arch(9, 0)),
        ((12, 0), Arch(12, 0)),
        ([8, 9], Arch(8, 9)),
        (12.0, Arch(12, 0)),
    ],
)
def test_every_spelling(spelling: object, want: Arch) -> None:
    assert Arch.parse(spelling) == want


def test_renderings() -> None:
    arch = Arch.parse("sm_120a")
    assert (arch.sm, arch.cc, arch.cc_text) == (120, (12, 0), "12.0")
    assert (arch.sm_code, arch.compute_code, str(arch)) == ("sm_120a", "compute_120a", "12.0a")
    assert str(Arch.parse("12.0+PTX")) == "12.0+PTX"
    assert Arch.parse("12.0+PTX").sm_code == "sm_120"


@pytest.mark.parametrize("bad", ["twelve", "sm120", "12.0b", "", None, "sm_"])
def test_bad_spelling_names_the_value(bad: object) -> None:
    with pytest.raises(
        ValueError, match=r"not a compute capability: .* \(e\.g\. 12\.0 or sm_120\)"
    ):
        Arch.parse(bad)


def test_list_entries_are_strict() -> None:
    """The recipe's arch list and TORCH_CUDA_ARCH_LIST take only the dotted spelling."""
    assert parse_list("12.0;9.0a, 8.9") == [Arch(12, 0), Arch(9, 0, "a"), Arch(8, 9)]
    assert parse_list(["12.0+PTX"]) == [Arch(12, 0, "", True)]
    for bad in ("sm_120", "120", "12.0+ptx"):
        message = f"'{bad}' is not an arch like 12.0, 12.0a or 12.0+PTX"
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_list([bad])
    with pytest.raises(ValueError, match="empty"):
        parse_list([])
