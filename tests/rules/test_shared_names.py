"""Names and constants both sides use live in one module, `sm120kit.remote.lib.names`.

A table of its functions (pure), and two reads of the package's source: no other module spells
one of its constants as a string literal, and no other module normalises a distribution name
with its own regular expression. Nothing runs on a host.
"""

from __future__ import annotations

import ast
import re

import pytest
from packaging.utils import canonicalize_name

from sm120kit.remote.lib import names
from tests.conftest import REPO

PACKAGE = REPO / "sm120kit"
HOME = "remote/lib/names.py"
#: Programs run inside a target interpreter (python -c), which has no hosts' library to import.
IN_TARGET = "remote/lib/in_target/"


@pytest.mark.parametrize(
    ("name", "dist", "stem"),
    [
        ("flash_attn", "flash-attn", "flash_attn"),
        ("Flash-Attn", "flash-attn", "flash_attn"),
        ("sgl.kernel", "sgl-kernel", "sgl_kernel"),
        ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu12", "nvidia_cuda_runtime_cu12"),
        ("a__b--c", "a-b-c", "a_b_c"),
        ("torch", "torch", "torch"),
    ],
)
def test_distribution_names(name: str, dist: str, stem: str) -> None:
    assert names.dist_name(name) == dist == str(canonicalize_name(name))
    assert names.dist_stem(name) == stem


@pytest.mark.parametrize(
    ("version", "xy"),
    [
        ("13.0.88", "13.0"),
        ("13.0", "13.0"),
        ("12.8.1", "12.8"),
        ("V13.0.88", "13.0"),
        ("v12.9", "12.9"),
        (" 12.4.131 ", "12.4"),
        ("13", None),
        ("", None),
        (None, None),
        ("cpu", None),
    ],
)
def test_cuda_xy(version: object, xy: str | None) -> None:
    assert names.cuda_xy(version) == xy


def test_install_record_path() -> None:
    assert names.install_record("/w/envs/x/", "flash-attn") == (
        "/w/envs/x/.sm120kit/installed/flash-attn.json"
    )


def modules() -> list[tuple[str, str]]:
    return [
        (str(p.relative_to(PACKAGE)), p.read_text(encoding="utf-8"))
        for p in sorted(PACKAGE.rglob("*.py"))
        if str(p.relative_to(PACKAGE)) != HOME
        and not str(p.relative_to(PACKAGE)).startswith(IN_TARGET)
    ]


#: Every constant of the shared module (upper-case str values).
CONSTANTS = {
    key: value
    for key, value in vars(names).items()
    if key.isupper() and isinstance(value, str) and not key.startswith("_")
}


def test_the_table_has_the_constants() -> None:
    assert {"CUDA_HOME_PTH", "PROVENANCE_FILE", "STACK_RECORD", "ENV_MARKER"} <= set(CONSTANTS)


def test_no_module_spells_a_shared_constant_again() -> None:
    """Each shared constant is defined once: no other module of sm120kit has its value as a
    string literal (a docstring that names it inside a sentence is no literal of it)."""
    found = []
    for rel, text in modules():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for key, value in CONSTANTS.items():
                    if node.value == value or node.value == value.rstrip("\n"):
                        found.append(f"{rel}:{node.lineno}: {key} {value!r}")
    assert not found, "import these from sm120kit.remote.lib.names:\n" + "\n".join(found)


#: A distribution-name normalisation of its own: a pattern that is PEP 503's run of separators
#: and nothing else (``r"[-_.]+"``), the whole of what a name normaliser substitutes; a version
#: pattern's ``[-_.]?`` between its parts is no normalisation.
OWN_NORMALISATION = re.compile(r"""r?["']\[(?:-_\.|_\.-|\._-|-\._)\]\+["']""")


def test_no_module_normalises_a_distribution_name_itself() -> None:
    found = [
        f"{rel}:{number}: {line.strip()}"
        for rel, text in modules()
        for number, line in enumerate(text.splitlines(), 1)
        if OWN_NORMALISATION.search(line) and not line.lstrip().startswith("#")
    ]
    assert not found, "use names.dist_name / names.dist_stem:\n" + "\n".join(found)
