"""flash-attn 2.8.3: the recipes' sdist pin and the FLASH_ATTN_CUDA_ARCHS check.

What flash-attention v2.8.3's setup.py (tag v2.8.3 = commit 060c9188beec3a8b62b33a3bfa6d5d2d44975fab,
the same file as in the PyPI sdist) does with that variable: split on ';', then
`"80" in cuda_archs()` ... `"120" in cuda_archs()`. Any other entry is skipped without a word;
with none left, torch's own arch list decides. These tests pin that table and show that a
value it would drop is refused per host, before any build, naming the value and its origin.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sm120kit.builds.knobs import parse_arch_list, resolve_knobs
from sm120kit.errors import RecipeError
from sm120kit.inventory.host import Host
from sm120kit.packages.flash_attn import (
    FLASH_ATTN_ARCHS,
    flash_attn_arch_problem,
    flash_attn_archs,
)
from sm120kit.recipes.select import load_recipes, resolve_for_host

REPO = Path(__file__).resolve().parents[2]
#: sha256 of flash_attn-2.8.3.tar.gz as PyPI lists it and as the downloaded file hashes.
SDIST_SHA256 = "1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d"
GIB = 1024**3
HOST_FACTS = {"cpu": {"count": 8}, "memory": {"available_bytes": 64 * GIB}}


def test_v2_8_3_accepts_exactly_these_strings() -> None:
    assert FLASH_ATTN_ARCHS["2.8.3"] == ("80", "90", "100", "120")


@pytest.mark.parametrize("value", ["120", "80;90;100;120", "90;120", "100"])
def test_values_setup_py_builds_pass(value: str) -> None:
    assert flash_attn_arch_problem("2.8.3", value) is None
    assert flash_attn_arch_problem("2.8.3.post1", value) is None


@pytest.mark.parametrize(
    ("value", "dropped", "tail"),
    [
        ("121", "'121'", "torch's own arch list would decide"),
        ("12.0", "'12.0'", "torch's own arch list would decide"),
        ("", "''", "torch's own arch list would decide"),
        ("120;86", "'86'", "it would build only 120"),
        ("80;110;120", "'110'", "it would build only 80;120"),
        ("120;", "''", "it would build only 120"),
        (" 120", "' 120'", "torch's own arch list would decide"),
    ],
)
def test_values_setup_py_would_drop_are_named(value: str, dropped: str, tail: str) -> None:
    problem = flash_attn_arch_problem("2.8.3", value)
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"FLASH_ATTN_CUDA_ARCHS={value!r}: flash-attn 2.8.3's setup.py")
    assert f"silently drops {dropped}" in problem and tail in problem


def test_v2_8_3_post2_accepts_the_same_strings() -> None:
    """post2's setup.py is byte-identical to tag v2.8.3.post1's (tests read it in
    test_flash_attn_cxx20.py's sdist), and its cuda_archs() is 2.8.3's."""
    assert FLASH_ATTN_ARCHS["2.8.3.post2"] == ("80", "90", "100", "120")
    assert flash_attn_arch_problem("2.8.3.post2", "120") is None
    assert "silently drops '121'" in str(flash_attn_arch_problem("2.8.3.post2", "120;121"))


@pytest.mark.parametrize("version", ["2.9.0", "2.8.2", "not-a-version"])
def test_release_whose_setup_py_was_not_read_is_refused(version: str) -> None:
    """Unreleased main adds 110, for one: a release nobody read is refused with one line
    instead of being passed unchecked."""
    problem = flash_attn_arch_problem(version, "120")
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"FLASH_ATTN_CUDA_ARCHS='120': flash-attn {version}'s setup.py")
    assert "was not read by sm120kit" in problem
    assert "(read: 2.8.3, 2.8.3.post1, 2.8.3.post2)" in problem


@pytest.mark.parametrize(
    ("arch_list", "value"),
    [(["12.0"], "120"), (["12.0a"], "120"), (["12.0+PTX", "9.0"], "120;90"), (["12.1"], "121")],
)
def test_arch_list_to_flash_attn_value(arch_list: list[str], value: str) -> None:
    assert flash_attn_archs(parse_arch_list(arch_list)) == value


def test_resolve_knobs_refuses_an_arch_it_would_drop() -> None:
    with pytest.raises(RecipeError, match=r"^package flash-attn: FLASH_ATTN_CUDA_ARCHS='121'"):
        resolve_knobs("flash-attn", "flash-attn", ["12.1"], HOST_FACTS, {}, version="2.8.3")
    with pytest.raises(RecipeError, match=r"FLASH_ATTN_CUDA_ARCHS='120;86'.*drops '86'"):
        resolve_knobs(
            "flash-attn",
            "flash-attn",
            ["12.0"],
            HOST_FACTS,
            {"FLASH_ATTN_CUDA_ARCHS": "120;86"},
            version="2.8.3",
        )
    ok = resolve_knobs("flash-attn", "flash-attn", ["12.0"], HOST_FACTS, {}, version="2.8.3")
    assert ok.env["FLASH_ATTN_CUDA_ARCHS"] == "120"


# -- the recipes ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recipes():  # type: ignore[no-untyped-def]
    return load_recipes(REPO / "recipes")


def test_recipes_pin_the_sdist_by_hash(recipes) -> None:  # type: ignore[no-untyped-def]
    for r in recipes.values():
        fa = next(p for p in r.packages if p.name == "flash-attn")
        assert (fa.version, fa.source) == ("2.8.3", {"kind": "pypi", "sha256": SDIST_SHA256})
    text = (REPO / "recipes" / "shared" / "packages.toml").read_text()
    assert "060c9188beec3a8b62b33a3bfa6d5d2d44975fab" in text


#: sha256 of flash_attn-2.8.3.post2.tar.gz (8,453,127 bytes) as PyPI lists it and as the
#: downloaded file hashes (tests/real/test_flash_attn_cxx20.py fetches it with that pin).
POST2_SHA256 = "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b"
CXX_PATCH = "flash-attn/0001-cxx-standard-from-torch.patch"


def test_cuda13_recipes_pin_post2_for_torch_2_14(recipes) -> None:  # type: ignore[no-untyped-def]
    """Torch 2.14 needs CUDA 13 (no 12.x builds after 2.11), so the CUDA 13 recipes carry
    the patched 2.8.3.post2 entry for it; the CUDA 12 recipes keep 2.8.3 alone."""
    for name, r in recipes.items():
        entries = [p for p in r.packages if p.name == "flash-attn"]
        if name in ("r570", "r575"):
            assert [p.version for p in entries] == ["2.8.3"]
            continue
        old, new = entries
        assert str(old.torch) == "<2.14,>=2.7"
        assert (new.version, str(new.torch)) == ("2.8.3.post2", ">=2.14")
        assert new.source == {"kind": "pypi", "sha256": POST2_SHA256}
        assert new.patches == [CXX_PATCH]
    shared = (REPO / "recipes" / "shared" / "packages.toml").read_text()
    assert "a8aa52b1ab3e9ca574c8a33b3f35afc017ffa2e2" in shared


@pytest.mark.parametrize(
    ("torch", "version", "patches"),
    [("2.9.1", "2.8.3", []), ("2.13.0", "2.8.3", []), ("2.14.1", "2.8.3.post2", [CXX_PATCH])],
)
def test_the_torch_in_force_picks_the_entry(recipes, torch, version, patches) -> None:  # type: ignore[no-untyped-def]
    box = host()
    box.vars["recipe.torch.version"] = torch
    res = resolve_for_host(recipes, box, None)
    pkg = res.package("flash-attn")
    assert (pkg["version"], pkg["patches"]) == (version, patches)
    assert res.package_names().count("flash-attn") == 1
    assert "flash-attn" not in res.problems
    # sgl-kernel 0.3.21 (torch ==2.9.1) is r570/r575's only: r580 has one torch, its lock's,
    # and its sgl-kernel is the stack's own release (0.4.10), whatever torch a host forces.
    assert res.package("sgl-kernel")["version"] == "0.4.10"


def test_package_overrides_apply_to_the_entry_the_torch_picks(recipes) -> None:  # type: ignore[no-untyped-def]
    box = host(FLASH_ATTN_CUDA_ARCHS="120;121")
    box.vars["recipe.torch.version"] = "2.14.1"
    res = resolve_for_host(recipes, box, None)
    [problem] = res.problems["flash-attn"]
    assert problem.startswith("FLASH_ATTN_CUDA_ARCHS='120;121': flash-attn 2.8.3.post2's")


def _with_shared_pins(tmp_path: Path, old: str, new: str) -> Path:
    """r580 beside a copy of the shared pins with one edit."""
    folder = tmp_path / "recipes"
    (folder / "shared").mkdir(parents=True)
    (folder / "r580.toml").write_text((REPO / "recipes" / "r580.toml").read_text())
    for name in ("packages.toml", "stacks.toml"):
        text = (REPO / "recipes" / "shared" / name).read_text()
        assert name != "packages.toml" or old in text
        (folder / "shared" / name).write_text(text.replace(old, new))
    (tmp_path / "patches").symlink_to(REPO / "patches")
    return folder


def test_entries_whose_torch_ranges_overlap_are_refused(tmp_path: Path) -> None:
    folder = _with_shared_pins(tmp_path, 'torch = ">=2.14"', 'torch = ">=2.9"')
    with pytest.raises(RecipeError) as err:
        load_recipes(folder)
    msg = str(err.value)
    assert "r580.toml:" in msg and "\n" not in msg
    assert "packages[2].torch: flash-attn's torch '>=2.9' overlaps packages[1]'s " in msg
    assert "(both admit torch 2.9)" in msg


def host(**knobs: str) -> Host:
    vars: dict[str, object] = {"target_driver": "580.95.05", "target_arch": "12.0"}
    sources = {}
    for key, value in knobs.items():
        var = f"recipe.packages.flash-attn.knobs.{key}"
        vars[var] = value
        sources[var] = "inventory/host_vars/box.yaml"
    return Host("box", vars=vars, var_sources=sources)


def test_recipe_arch_gives_no_problem(recipes) -> None:  # type: ignore[no-untyped-def]
    res = resolve_for_host(recipes, host(), None)
    assert "flash-attn" not in res.problems


def test_knob_it_would_drop_is_a_problem_naming_its_origin(recipes) -> None:  # type: ignore[no-untyped-def]
    res = resolve_for_host(recipes, host(FLASH_ATTN_CUDA_ARCHS="120;121"), None)
    [problem] = res.problems["flash-attn"]
    # r580's torch is its lock's, 2.14.1: the entry in force is 2.8.3.post2 (same setup.py rule)
    assert problem.startswith("FLASH_ATTN_CUDA_ARCHS='120;121': flash-attn 2.8.3.post2's setup.py")
    assert "silently drops '121', so it would build only 120" in problem
    assert problem.endswith(
        "(inventory/host_vars/box.yaml (recipe.packages.flash-attn.knobs.FLASH_ATTN_CUDA_ARCHS))"
    )


def test_recipe_arch_it_would_drop_is_a_problem(tmp_path: Path) -> None:
    """A recipe for 12.0 and 8.6: '86' is not a value v2.8.3 knows, so that recipe cannot
    build flash-attn as written."""
    text = (REPO / "recipes" / "r580.toml").read_text()
    assert text.count('arch = ["12.0"]') == 1
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "r580.toml").write_text(text.replace('arch = ["12.0"]', 'arch = ["12.0", "8.6"]'))
    patches = REPO / "patches"
    (tmp_path / "patches").symlink_to(patches)
    res = resolve_for_host(load_recipes(folder), host(), None)
    [problem] = res.problems["flash-attn"]
    assert "FLASH_ATTN_CUDA_ARCHS='120;86'" in problem and "drops '86'" in problem
    assert "derived from arch ['12.0', '8.6'] (" in problem and "r580" in problem


def test_bad_sdist_hash_is_one_line_error_naming_file_and_key(tmp_path: Path) -> None:
    folder = _with_shared_pins(tmp_path, SDIST_SHA256, "1e71dd64")
    with pytest.raises(RecipeError) as err:
        load_recipes(folder)
    msg = str(err.value)
    assert "shared/packages.toml:" in msg and "source.sha256" in msg and "64 hex digits" in msg
    assert "\n" not in msg
