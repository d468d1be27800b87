"""Cubin sets, pure-Python releases and version ranges in the catalogue (sm120kit/catalogue.py,
catalogue_cubins.py; docs/catalogue.md): table tests on hand-made facts and small zip files
made here (a package source following flashinfer's artifact convention, cubin ELF headers
built in bytes), the hosts' range check (remote/lib/probe_stack.py), and the committed 0.5.23
catalogue read as data (no wheel is read)."""

from __future__ import annotations

import struct
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from sm120kit.errors import RecipeError
from sm120kit.remote.lib.probe_stack import holds_for
from sm120kit.stack import catalogue as cat
from sm120kit.stack.catalogue import (
    NO,
    UNKNOWN,
    YES,
    Catalogue,
    CubinSet,
    ModuleFacts,
    ReleaseFacts,
    WheelFacts,
    carry_when,
    dump,
    parse,
)
from sm120kit.stack.catalogue_cubins import cubin_sets, resolve_shipped
from sm120kit.stack.lock import CHECKOUT, load_lock

if __import__("sys").version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FETCHED = CubinSet(
    "TRTLLM_GEN_FMHA", "abc/fmha/trtllm-gen/", False, url="https://repo/abc/fmha/trtllm-gen/",
    url_env="PKG_CUBINS_REPOSITORY", checksums_sha256="d" * 64,
    unknown={"12.0": "downloaded at run time"}, source="pkg/artifacts.py ArtifactPath.X",
)  # fmt: skip
NAMED = CubinSet("DSL_FMHA", "d/", False, archs=("sm_100a",), archs_from="ARCHS",
                 not_on={"12.0": "sm_100a only"})  # fmt: skip
SHIPPED = CubinSet("pkg/cubins/x", "pkg/cubins/x", True, files=2, archs=("sm_100a", "sm_120a"),
                   archs_from="ELF e_flags of 2 cubins")  # fmt: skip


def _release(*sets: CubinSet, mods: tuple[ModuleFacts, ...] = (), when: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    wheel = WheelFacts("0.7.2", "pkg-0.7.2-py3-none-any.whl", "sha", mods)
    return ReleaseFacts("pkg", ("0.7.2",), (wheel,), cubin_sets=sets, when=when)


def test_cubin_sets_and_ranges_read_back_as_written() -> None:
    named = replace(NAMED, shipped_in="pkg-cubin 0.7.2 pkg_cubin/cubins/d")
    one = Catalogue((_release(FETCHED, named, SHIPPED, when=(">=0.7,<0.8",)),))
    back = parse(tomllib.loads(dump(one, [])), "c.toml")
    assert back.releases == one.releases
    assert back.cubin_sets("PKG", "0.7.5") == (FETCHED, named, SHIPPED)
    assert back.cubin_sets("pkg", "0.8.0") == ()  # not read, no range: lookup says unknown


@pytest.mark.parametrize(
    ("cset", "answer"),
    [(FETCHED, UNKNOWN), (NAMED, NO), (SHIPPED, YES),
     (CubinSet("s", "s", True), UNKNOWN)],  # no archs, arch not judged: never a pass
)  # fmt: skip
def test_a_cubin_sets_coverage_of_12_0(cset: CubinSet, answer: str) -> None:
    got, why = cset.coverage("12.0")
    assert got == answer and why


@pytest.mark.parametrize(
    ("release", "nothing"),
    [
        (_release(), True),  # a pure-Python wheel: nothing to check
        (_release(mods=(ModuleFacts("m.so", cudart=13),)), True),  # no device code
        (_release(mods=(ModuleFacts("m.so", sass=("sm_120",)),)), False),
        (_release(SHIPPED), True),
        (_release(FETCHED), False),  # unknown until downloaded
        (_release(NAMED), False),
    ],
)
def test_nothing_to_check_only_when_nothing_can_miss_the_arch(
    release: ReleaseFacts, nothing: bool
) -> None:
    assert release.nothing_to_check("12.0") is nothing


@pytest.mark.parametrize(
    ("when", "version", "held"),
    [
        ((), "0.7.2", True),
        ((), "0.7.2+cu130", True),
        ((), "0.7.3", False),  # only the version read, without a range
        ((">=0.7,<0.8",), "0.7.3", True),
        ((">=0.7,<0.8",), "0.8.0rc1", False),
        ((">=0.7,<0.8", "==0.9.1"), "0.9.1", True),
        (("~=0.7.0",), "0.7.9", True),
    ],
)
def test_facts_hold_for_their_version_ranges(
    when: tuple[str, ...], version: str, held: bool
) -> None:
    rel = _release(when=when)
    assert rel.holds_for(version) is held
    # the hosts' check (stdlib) answers the same from the probe's form of the fact
    assert (
        holds_for({"versions": list(rel.versions), "when": list(rel.specifiers())}, version) is held
    )


@pytest.mark.parametrize(
    ("fact", "version", "held"),
    [
        ({"versions": ["0.4.10"]}, "0.4.10+cu130", True),  # a fact from an older controller
        ({"versions": ["0.4.10"]}, "0.4.11", False),
        ({"versions": ["0.4.10"], "when": [">=0.4.10,<0.5"]}, "0.4.11", True),
        ({"versions": [], "when": []}, "0.4.10", False),
        ({"versions": ["0.4.10"]}, None, False),
    ],
)
def test_the_hosts_facts_match_by_range(fact: dict, version: object, held: bool) -> None:  # type: ignore[type-arg]
    assert holds_for(fact, version) is held


@pytest.mark.parametrize(
    ("new_mods", "kept"),
    [
        ((ModuleFacts("m.so", sass=("sm_120",)),), True),  # read again, the same facts
        ((ModuleFacts("m.so", sass=("sm_90",)),), False),  # the facts differ: range dropped
    ],
)
def test_a_range_survives_regeneration_only_with_the_same_facts(
    new_mods: tuple[ModuleFacts, ...], kept: bool
) -> None:
    before = Catalogue((_release(mods=(ModuleFacts("m.so", sass=("sm_120",)),),
                                 when=(">=0.7,<0.8",)),))  # fmt: skip
    again, dropped = carry_when(before, Catalogue((_release(mods=new_mods),)))
    assert again.releases[0].holds_for("0.7.5") is kept
    assert bool(dropped) is not kept
    assert carry_when(None, again) == (again, [])


@pytest.mark.parametrize(
    ("release", "message"),
    [
        ({"when": ["=>0.7"]}, "not a version specifier"),
        ({"cubin_set": [{"name": "X"}]}, "needs a path and shipped"),
        ({"cubin_set": [{"name": "X", "path": "p/", "shipped": False, "unknown": {"12.0": 1}}]},
         "unknown: expected"),
    ],
)  # fmt: skip
def test_bad_ranges_and_cubin_sets_are_one_line_errors(release: dict, message: str) -> None:  # type: ignore[type-arg]
    doc = {"catalogue": {"format": 1},
           "release": [{"distribution": "pkg", "versions": ["1.0"], **release}]}  # fmt: skip
    with pytest.raises(RecipeError, match=message):
        parse(doc, "locks/x/catalogue.toml")


# A package source following flashinfer's convention (flashinfer 0.7.2's flashinfer/artifacts.py
# and flashinfer/jit/cubin_loader.py name their sets this way), written here.
LOADER_PY = """
import os
PKG_CUBINS_REPOSITORY = os.environ.get("PKG_CUBINS_REPOSITORY", "https://repo.example/base/")
"""
ARTIFACTS_PY = """
class ArtifactPath:
    TRTLLM_GEN_FMHA: str = "abc/fmha/trtllm-gen/"
    TRTLLM_GEN_BMM: str = (
        "def/batched_gemm-2a674db"
    )
    DSL_FMHA: str = "ghi/fmha/cute-dsl/"
    DSL_FMHA_ARCHS: tuple[str, ...] = ("sm_100a", "sm_103a")
    NOT_A_PATH: str = "text"

class CheckSumHash:
    TRTLLM_GEN_FMHA: str = "aa"
"""


def _cubin(flags: int) -> bytes:
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x41, 8]) + bytes(7)
    return ident + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, 0, flags, 64, 0, 0, 64, 0, 0)


def test_cubin_sets_are_read_from_the_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/jit/cubin_loader.py", LOADER_PY)
        zf.writestr("pkg/artifacts.py", ARTIFACTS_PY)
        zf.writestr("pkg_cubin/cubins/k/a.cubin", _cubin(0x6006402))  # sm_100
        zf.writestr("pkg_cubin/cubins/k/b.cubin", _cubin(0x6007802))  # sm_120
        zf.writestr("pkg_cubin/cubins/old/c.cubin", _cubin(0x6005A04))  # sm_90
    with zipfile.ZipFile(wheel) as zf:
        sets = {s.name: s for s in cubin_sets(zf, "pkg", ("12.0",))}
    assert sorted(sets) == ["DSL_FMHA", "TRTLLM_GEN_BMM", "TRTLLM_GEN_FMHA",
                            "pkg_cubin/cubins/k", "pkg_cubin/cubins/old"]  # fmt: skip
    fmha = sets["TRTLLM_GEN_FMHA"]
    assert not fmha.shipped and fmha.url == "https://repo.example/base/abc/fmha/trtllm-gen/"
    assert fmha.url_env == "PKG_CUBINS_REPOSITORY" and fmha.checksums_sha256 == "aa"
    assert (
        fmha.coverage("12.0")[0] == UNKNOWN and "unknown until downloaded" in fmha.unknown["12.0"]
    )
    assert fmha.source == "pkg/artifacts.py ArtifactPath.TRTLLM_GEN_FMHA"
    assert sets["TRTLLM_GEN_BMM"].url == "https://repo.example/base/def/batched_gemm-2a674db/"
    dsl = sets["DSL_FMHA"]
    assert dsl.archs == ("sm_100a", "sm_103a") and dsl.coverage("12.0")[0] == NO
    assert sets["pkg_cubin/cubins/k"].archs == ("sm_100", "sm_120")
    assert sets["pkg_cubin/cubins/k"].coverage("12.0")[0] == YES
    assert sets["pkg_cubin/cubins/old"].coverage("12.0")[0] == NO


@pytest.mark.parametrize(
    ("cubin_version", "answer"),
    [("0.6.12", NO), ("0.6.11", UNKNOWN)],  # flashinfer reads flashinfer-cubin of its version only
)
def test_a_downloaded_set_shipped_by_another_distribution_takes_its_archs(
    cubin_version: str, answer: str
) -> None:
    """sglang 0.5.15's lock pins flashinfer-python and flashinfer-cubin 0.6.12: the cubins
    flashinfer would download are in flashinfer-cubin's wheel (read there, sm_100/sm_103)."""
    fetched = CubinSet("TRTLLM_GEN_FMHA", "158f/fmha/trtllm-gen/", False,
                       unknown={"12.0": "unknown until downloaded"})  # fmt: skip
    held = CubinSet("flashinfer_cubin/cubins/158f/fmha/trtllm-gen",
                    "flashinfer_cubin/cubins/158f/fmha/trtllm-gen", True, files=3,
                    archs=("sm_100a", "sm_103a"), archs_from="ELF e_flags of 3 cubins",
                    not_on={"12.0": "sm_100a, sm_103a only"})  # fmt: skip
    python = ReleaseFacts("flashinfer-python", ("0.6.12",), (), cubin_sets=(fetched,))
    cubin = ReleaseFacts("flashinfer-cubin", (cubin_version,), (), cubin_sets=(held,))
    got = resolve_shipped([python, cubin])[0].cubin_sets[0]
    assert got.coverage("12.0")[0] == answer
    if answer == NO:
        assert got.archs == held.archs and got.shipped_in.startswith("flashinfer-cubin 0.6.12 ")
        assert "shipped in flashinfer-cubin 0.6.12" in got.not_on["12.0"] and not got.unknown


def test_the_committed_0_5_23_catalogue_has_cubin_sets_and_every_distribution() -> None:
    """locks/sglang-0.5.23/catalogue.toml as data: flashinfer-python 0.7.2's sets (read from
    its wheel's flashinfer/artifacts.py) and one release per distribution of the cp311 lock."""
    lock_dir = CHECKOUT / "locks" / "sglang-0.5.23"
    one = cat.load_beside(lock_dir)
    assert one is not None
    sets = {s.name: s for s in one.cubin_sets("flashinfer_python", "0.7.2")}
    for name in ("TRTLLM_GEN_FMHA", "TRTLLM_GEN_BMM", "TRTLLM_GEN_GEMM", "DEEPGEMM"):
        assert not sets[name].shipped and sets[name].coverage("12.0")[0] == UNKNOWN, name
    assert sets["DSL_FMHA"].coverage("12.0")[0] == NO
    lock = load_lock(next(lock_dir.glob("pylock.cp311-*.toml")), "cp311")
    for entry in lock.packages:
        assert one.lookup(entry.name, entry.version).known, entry.name
    pure = one.lookup("aiohappyeyeballs", "2.7.1").facts
    assert pure is not None and pure.nothing_to_check("12.0")
