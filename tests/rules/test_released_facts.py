"""No fact about a released package is written by hand in sm120kit/ (issue #32): what a
release carries is read from its wheels into the generated catalogues
(``locks/*/catalogue.toml``), and code asks them. Outside the catalogues a released package's
facts stand only in cited rules: the files of `CITED_RULES`, each rule naming the upstream
files (and releases) it was read from.

The facts looked for are the catalogues' own, so a new release's facts are looked for as soon
as its catalogue is drafted: for each kernel release (one with a module that cannot run on a
target arch, or a loader), a string of code (docstrings and comments are prose, not read)
naming the release (``sglang-kernel 0.4.10``, ``sgl-flash-mla==1.0.0``), naming one of those
modules by its path (``sgl_kernel/flash_ops``, ``sgl_kernel.flashmla_ops``), or listing its
SASS (``sm_80, sm_86, sm_90a``). A table test over the source (no host, no wheel).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sm120kit.packages import stack as serving

ROOT = Path(__file__).resolve().parents[2] / "sm120kit"

#: Files of cited rules, relative to sm120kit/, and why each may state release facts.
CITED_RULES = {
    # Flag -> backend -> module rules, each with its upstream source and version range.
    "preflight/rules.py": "preflight's cited rules",
    # Which run-time toolchain lookup a package follows, read from its Python source (cited).
    "packages/released.py": "toolchain rules per package, cited",
    "remote/lib/jit_toolchain.py": "the toolchain lookup rules, each citing its files",
    # How the tool's own builds from source behave (CMake, setup.py), each citing the file.
    "packages/sgl_kernel.py": "sgl-kernel's build from source",
    "packages/sgl_kernel_cmake.py": "sgl-kernel's CMake targets per source version",
    "packages/flash_attn.py": "flash-attn's setup.py arch handling per source version",
    # Each engine's launch modules and JIT rules, each citing the released files it was read from.
    "engines.py": "the serving engines' descriptors, cited",
}


@functools.lru_cache(maxsize=1)
def _kernel_facts() -> tuple[list[re.Pattern[str]], list[str], list[str]]:
    """(release-name patterns, module paths, SASS lists) of the catalogues' kernel releases."""
    releases: list[re.Pattern[str]] = []
    modules: set[str] = set()
    sass: set[str] = set()
    for cat in serving.catalogues():
        for rel in cat.releases:
            missing = [m for m in rel.modules() if m.not_on]
            if not missing and rel.loader is None:
                continue
            names = sorted(cat.names(rel.distribution))
            spelled = "|".join(re.escape(n).replace(r"\-", "[-_]") for n in names)
            versions = "|".join(re.escape(v) for v in rel.versions)
            releases.append(re.compile(rf"\b(?:{spelled})\s*(?:==|\s)\s*(?:{versions})\b", re.I))
            for mod in missing:
                if "/" in mod.key:
                    modules |= {mod.key, mod.key.replace("/", ".")}
                if len(mod.sass) > 1:
                    sass.add(", ".join(mod.sass))
    return releases, sorted(modules), sorted(sass)


@functools.lru_cache(maxsize=1)
def _tokens() -> frozenset[str]:
    """Literal pieces one of which any fact contains (its versions, module paths, SASS
    lists), lower-case: a cheap test before the precise patterns."""
    _releases, modules, sass = _kernel_facts()
    return frozenset(_kernel_versions() | {m.lower() for m in modules} | set(sass))


@functools.lru_cache(maxsize=1)
def _kernel_versions() -> frozenset[str]:
    return frozenset(
        v.lower()
        for cat in serving.catalogues()
        for rel in cat.releases
        if rel.loader is not None or any(m.not_on for m in rel.modules())
        for v in rel.versions
    )


def _maybe(text: str) -> bool:
    low = text.lower()
    return any(t in low for t in _tokens())


def _code_strings(path: Path) -> Iterator[tuple[int, str]]:
    """Every string constant of a module but its docstrings, with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


def hand_written_facts(path: Path) -> list[str]:
    """``line: what`` for each release fact a module of sm120kit states in its code."""
    if not _maybe(path.read_text(encoding="utf-8")):
        return []  # nothing to look at closer (most modules): no parse
    releases, modules, sass = _kernel_facts()
    found = []
    for line, text in _code_strings(path):
        if not _maybe(text):
            continue
        hits = [p.search(text) for p in releases]
        what = [m.group(0) for m in hits if m]
        what += [m for m in modules if re.search(rf"(?<![\w/.]){re.escape(m)}(?![\w])", text)]
        what += [s for s in sass if s in text]
        if what:
            found.append(f"{line}: {', '.join(what)}")
    return found


def test_the_catalogues_have_facts_to_look_for() -> None:
    releases, modules, sass = _kernel_facts()
    assert releases and "sgl_kernel/flash_ops" in modules and "sm_80, sm_86, sm_90a" in sass


@pytest.mark.parametrize(
    "text",
    [
        "FA3 carries SASS for sm_80, sm_86, sm_90a only",
        "sglang-kernel 0.4.10",
        "SGLang_Kernel==0.4.10",
        "imports sgl_kernel.flashmla_ops",
    ],
)
def test_a_hand_written_fact_is_found(tmp_path: Path, text: str) -> None:
    module = tmp_path / "m.py"
    module.write_text(f'"""Prose may say sglang-kernel 0.4.10."""\nWHY = {text!r}\n')
    assert hand_written_facts(module) == [f"2: {hand_written_facts(module)[0].split(': ', 1)[1]}"]
    module.write_text(f'"""Prose may say {text}."""\n# and so may comments: {text}\n')
    assert hand_written_facts(module) == []


def test_no_release_fact_is_written_by_hand_in_code() -> None:
    stated = {
        str(p.relative_to(ROOT)): facts
        for p in sorted(ROOT.rglob("*.py"))
        if str(p.relative_to(ROOT)) not in CITED_RULES and (facts := hand_written_facts(p))
    }
    assert not stated, (
        "release facts written by hand (the catalogue holds them, read from the wheels; "
        f"a cited rule belongs in one of {sorted(CITED_RULES)}): {stated}"
    )


def test_every_cited_rules_file_exists() -> None:
    assert all((ROOT / name).is_file() for name in CITED_RULES)
