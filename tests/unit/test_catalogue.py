"""The catalogue of release facts (sm120kit/stack/catalogue.py, stack/catalogue_read.py): table tests of
reading, writing, lookup by name and version, version ranges and the loader reader, on
hand-made facts and small zip files made here; plus the committed 0.5.23 catalogue read as
data (no wheel is read: tests/real/test_wheel_check_real.py compares it with the real wheel)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from sm120kit.errors import RecipeError
from sm120kit.stack import catalogue as cat
from sm120kit.stack.catalogue import (
    Catalogue,
    LoaderFacts,
    ModuleFacts,
    ReleaseFacts,
    WheelFacts,
    dump,
    merge_versions,
    parse,
)
from sm120kit.stack.catalogue_read import cuda_requires, not_on_reason, read_loader
from sm120kit.stack.lock import CHECKOUT

if __import__("sys").version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FA3 = ModuleFacts(
    "sgl_kernel/flash_ops.abi3.so",
    sass=("sm_80", "sm_86", "sm_90a"),
    cudart=13,
    nvcc="13.0.88",
    not_on={"12.0": "no code for 12.0"},
)
COMMON = ModuleFacts("sgl_kernel/sm100/common_ops.abi3.so", sass=("sm_90a", "sm_120a"), cudart=13)
BARE = ModuleFacts("deep_gemm/_C.so", cudart=13)  # no device code
LOADER = LoaderFacts("sgl_kernel", "common_ops", {"9.0": "sm90", "*": "sm100"}, "sm100", "x.py f()")


def _rel(version: str, *mods: ModuleFacts, dist: str = "sglang-kernel") -> ReleaseFacts:
    wheel = WheelFacts(version, f"{dist}-{version}.whl", f"sha-{dist}-{version}", mods)
    return ReleaseFacts(
        dist, (version,), (wheel,), loader=LOADER if dist == "sglang-kernel" else None
    )


def _cat(*releases: ReleaseFacts) -> Catalogue:
    return Catalogue(tuple(releases), aliases={"sgl-kernel": "sglang-kernel"})


def test_dump_reads_back_the_same_facts() -> None:
    one = _cat(_rel("0.4.10", FA3, COMMON), _rel("0.2.3", BARE, dist="sgl-deep-gemm"))
    text = dump(one, ["made here"])
    back = parse(tomllib.loads(text), "c.toml")
    assert sorted(back.releases, key=repr) == sorted(one.releases, key=repr)
    assert back.aliases == {"sgl-kernel": "sglang-kernel"}
    assert text.startswith("# made here\n[catalogue]\nformat = 1\n")


def test_no_device_code_is_said_as_such_never_as_empty_lists() -> None:
    text = dump(_cat(_rel("0.2.3", BARE, dist="sgl-deep-gemm")), [])
    assert '"device_code" = false' in text and '"sass"' not in text
    assert not BARE.device_code and FA3.device_code


@pytest.mark.parametrize(
    ("name", "version", "known"),
    [
        ("sglang-kernel", "0.4.10", True),
        ("SGLang_Kernel", "0.4.10", True),
        ("sgl-kernel", "0.4.10", True),  # the old name finds the renamed distribution's facts
        ("sgl_kernel", "0.4.10+cu130", True),  # a local label is the same release
        ("sglang-kernel", "0.4.11", False),  # a version not read: unknown, never a pass
        ("flash-attn", "2.8.3", False),  # a distribution not read
    ],
)
def test_lookup_by_any_name_and_only_versions_read(name: str, version: str, known: bool) -> None:
    found = _cat(_rel("0.4.10", FA3)).lookup(name, version)
    assert found.known is known
    if not known:
        assert cat.UNKNOWN in found.reason and name in found.reason


def test_versions_with_the_same_facts_share_one_entry() -> None:
    rows = [_rel("0.4.9", FA3), _rel("0.4.10", FA3), _rel("0.5.0", COMMON)]
    merged = merge_versions(rows)
    assert [r.versions for r in merged] == [("0.4.9", "0.4.10"), ("0.5.0",)]
    one = _cat(*merged)
    assert one.lookup("sglang-kernel", "0.4.9").facts is merged[0]
    assert one.lookup("sglang-kernel", "0.4.10").facts is merged[0]
    assert not one.lookup("sglang-kernel", "0.4.95").known


def test_not_for_arch_leaves_the_loaders_module_to_be_judged() -> None:
    broken = ModuleFacts("sgl_kernel/sm100/common_ops.abi3.so", sass=("sm_90a",),
                         not_on={"12.0": "no code"})  # fmt: skip
    one = _cat(_rel("0.4.10", FA3, broken))
    assert one.not_for_arch("12.0") == {"sgl_kernel/flash_ops": "no code for 12.0"}
    assert one.not_for_arch("9.0") == {}
    assert one.loaders() == {"sglang-kernel": {"9.0": "sm90", "*": "sm100"}}
    assert one.by_sha256("sha-sglang-kernel-0.4.10") is not None
    assert one.by_sha256("other") is None


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "not a catalogue of format 1"),
        ({"catalogue": {"format": 1}, "release": [{"distribution": "x", "versions": []}]},
         "at least one version read"),
        ({"catalogue": {"format": 1}, "release": [{"distribution": "x", "versions": ["1"],
          "wheel": [{"version": "1", "filename": "f", "sha256": "s",
                     "modules": [{"path": "a.so", "device_code": False, "sass": ["sm_90"]}]}]}]},
         "device_code = false beside SASS"),
    ],
)  # fmt: skip
def test_bad_catalogues_are_one_line_errors(doc: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(RecipeError, match=message):
        parse(doc, "locks/x/catalogue.toml")


def test_not_on_reason_names_relocatable_and_outside_code() -> None:
    ep = ModuleFacts("deep_ep/_C.so", sass=("sm_90", "sm_100"), relocatable=("sm_120",))
    why = not_on_reason(ep, "sgl-deep-ep", "0.1.2", (12, 0))
    assert why is not None and "sm_90, sm_100 only: no code for 12.0" in why
    assert "relocatable device code" in why and "sm_120" in why
    assert not_on_reason(COMMON, "sglang-kernel", "0.4.10", (12, 0)) is None
    assert not_on_reason(BARE, "sgl-deep-gemm", "0.2.3", (12, 0)) is None  # nothing to miss
    jit = ModuleFacts("m.so", ptx=("compute_90",))
    assert not_on_reason(jit, "x", "1", (12, 0)) is None  # PTX the driver can JIT


LOAD_UTILS = """
def _load_architecture_specific_ops():
    cc = _get_compute_capability()
    if cc == 90:
        ops_subdir = "sm90"
    elif cc is not None:
        ops_subdir = "sm100"
    else:
        ops_subdir = "sm100"
    return ops_subdir
"""


def test_the_loader_rule_is_read_from_the_packages_source(tmp_path: Path) -> None:
    wheel = tmp_path / "w.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sgl_kernel/load_utils.py", LOAD_UTILS)
        zf.writestr("sgl_kernel/sm90/common_ops.abi3.so", b"")
        zf.writestr("sgl_kernel/sm100/common_ops.abi3.so", b"")
    with zipfile.ZipFile(wheel) as zf:
        found = read_loader(zf)
    assert found == LoaderFacts(
        "sgl_kernel", "common_ops", {"9.0": "sm90", "*": "sm100"}, "sm100",
        "sgl_kernel/load_utils.py _load_architecture_specific_ops()",
    )  # fmt: skip
    plain = tmp_path / "p.whl"
    with zipfile.ZipFile(plain, "w") as zf:
        zf.writestr("pkg/sm90/m.so", b"")
    with zipfile.ZipFile(plain) as zf:
        assert read_loader(zf) is None  # one directory: no choice to read


def test_cuda_requirements_are_those_naming_cuda() -> None:
    reqs = ["torch==2.14.1", 'nvidia-cuda-runtime; extra == "cu13"', "nvidia-nccl-cu13==2.30.7"]
    assert cuda_requires(reqs) == tuple(reqs[1:])


def test_the_committed_0_5_23_catalogue_reads_and_holds_the_stacks_facts() -> None:
    """The generated file (locks/sglang-0.5.23/catalogue.toml) as data: the facts the recipes
    used to hold by hand are in it, and sgl-kernel finds sglang-kernel's."""
    one = cat.load_beside(CHECKOUT / "locks" / "sglang-0.5.23")
    assert one is not None and one.targets == ("12.0",)
    skipped = one.not_for_arch("12.0")
    for key in ("sgl_kernel/flash_ops", "sgl_kernel/flashmla_ops", "flash_mla/_C_legacy",
                "flash_mla/cuda", "nvidia/cu13/lib/libcufft", "nvidia/cu13/lib/libcufftw"):  # fmt: skip
        assert key in skipped, key
    assert "deep_ep/_C" in skipped and "nccl/m2n/lib/cu13/libnccl_m2n" in skipped
    assert one.loaders()["sglang-kernel"] == {"9.0": "sm90", "*": "sm100"}
    rel = one.lookup("sgl-kernel", "0.4.10").facts
    assert rel is not None and rel.distribution == "sglang-kernel"
    common = next(m for m in rel.modules() if m.path == "sgl_kernel/sm100/common_ops.abi3.so")
    assert "sm_120a" in common.sass and common.cudart == 13 and not common.not_on
    assert not one.lookup("sglang-kernel", "0.4.11").known
