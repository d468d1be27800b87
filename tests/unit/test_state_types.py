"""Per-host state is typed: no `Any` in `ProvisionState`'s fields, also nested in Optional,
unions and containers, and in the records it owns (`PackageRecord`, a TypedDict; `HostFacts`
and its records). Pure: type hints read, nothing run. `HostFacts` is parsed from a facts probe
document as the probe prints it (the shape of sm120kit/remote/facts_probe.py's `main`)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Optional, TypedDict

import pytest

from sm120kit import host_facts
from sm120kit.host_facts import Compiler, FoundPython, FoundToolkit, HostFacts
from sm120kit.state import ProvisionState


def _is_typeddict(tp: object) -> bool:
    return isinstance(tp, type) and typing.is_typeddict(tp)


def any_paths(tp: object, where: str, seen: set[object] | None = None) -> list[str]:
    """Where `Any` occurs in type `tp`: inside its arguments (Optional, unions, containers),
    in a TypedDict's keys and in the fields of a dataclass of `sm120kit.host_facts`."""
    seen = set() if seen is None else seen
    if tp is Any:
        return [where]
    if isinstance(tp, type) and tp in seen:
        return []
    found: list[str] = []
    for i, arg in enumerate(typing.get_args(tp)):
        found += any_paths(arg, f"{where}[{i}]", seen)
    if _is_typeddict(tp) or (
        dataclasses.is_dataclass(tp) and getattr(tp, "__module__", "") == host_facts.__name__
    ):
        seen.add(tp)
        for name, hint in typing.get_type_hints(tp).items():
            found += any_paths(hint, f"{where}.{name}", seen)
    return found


class _Rec(TypedDict, total=False):
    ok: int
    bad: dict[str, Any]


@pytest.mark.parametrize(
    ("tp", "expect"),
    [
        (int, []),
        (Any, ["t"]),
        (Optional[Any], ["t[0]"]),  # noqa: UP045 (the spelling under test)
        (dict[str, Any], ["t[1]"]),
        (list[tuple[int, Any]], ["t[0][1]"]),
        (int | dict[str, list[Any]], ["t[1][1][0]"]),
        (dict[str, _Rec], ["t[1].bad[1]"]),
        (dict[str, object], []),
    ],
)
def test_any_finder(tp: object, expect: list[str]) -> None:
    assert any_paths(tp, "t") == expect


def test_provision_state_has_no_any() -> None:
    hints = typing.get_type_hints(ProvisionState)
    assert {"facts", "packages", "python", "stack_lock", "resolved"} <= set(hints)
    found = [p for name, hint in hints.items() for p in any_paths(hint, name)]
    assert found == [], found


PROBE = {
    "hostname": "gpu1",
    "work_root": "/home/u/.sm120kit",
    "arch": "x86_64",
    "glibc": "2.36",
    "os": {"id": "debian", "id_like": None, "version_id": "12", "codename": "bookworm"},
    "gcc": [{"path": "/usr/bin/gcc", "version": "12.2.0"}],
    "python": [{"path": "/usr/bin/python3.11", "version": "3.11.2"}],
    "gpu": {
        "present": True,
        "driver_version": "580.95.05",
        "module": "open",
        "error": None,
        "gpus": [{"index": 0, "name": "RTX PRO 6000", "compute_cap": "12.0", "memory_mib": 97887}],
    },
    "cuda": [{"path": "/usr/local/cuda-13.0", "source": "system", "version": "13.0.2"}],
}


def test_host_facts_from_the_probe_document() -> None:
    doc: dict[str, object] = {k: v for k, v in PROBE.items()}
    facts = HostFacts.from_json(doc)
    assert (facts.work_root, facts.arch, facts.glibc, facts.os.id) == (
        "/home/u/.sm120kit",
        "x86_64",
        "2.36",
        "debian",
    )
    assert facts.gpu.present and facts.gpu.gpus[0].compute_cap == "12.0"
    assert facts.gcc == [Compiler("/usr/bin/gcc", "12.2.0")]
    assert facts.cuda[0].version == "13.0.2" and facts.json is doc
    # What the run changes on the host, the typed facts and the probe's document both say.
    facts.use_compiler(Compiler("/opt/gcc-13/bin/gcc", "13.3.0", "nvcc_ccbin"))
    facts.add_python(FoundPython("/w/python/bin/python3.12", "3.12.8"))
    facts.add_toolkit(FoundToolkit("/w/toolkits/13.0", "work_root", "13.0.2", None, "13.0", None))
    assert HostFacts.from_json(doc) == facts
    assert [g["path"] for g in facts.toolkit_docs()] == ["/usr/local/cuda-13.0", "/w/toolkits/13.0"]


@pytest.mark.parametrize(
    "doc",
    [{}, {"work_root": "/w"}, {"gpu": "not a table", "gcc": [1, {"no": "path"}], "os": None}],
)
def test_missing_or_malformed_facts_read_as_unknown(doc: dict[str, object]) -> None:
    facts = HostFacts.from_json(doc)
    assert not facts.gpu.present and facts.gcc == [] and facts.os.id is None
    assert facts.work_root == doc.get("work_root", "")
