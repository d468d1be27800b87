"""`provision_parts`: what a host's provision does (the stack or not, which builds) and why,
from flags and host vars. A pure function: a table, no hosts, nothing simulated; and the
CLI's one line for both flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import RecipeError
from sm120kit.stack.choice import provision_parts
from tests.conftest import invoke_env, run_invoke

CASES: list[tuple[str, dict[str, Any], tuple[bool, str, tuple[str, ...], str]]] = [
    (
        "default: the stack, no builds",
        {},
        (
            True,
            "recipe r580's serving stack, by default",
            (),
            "none named (--package, provision_packages)",
        ),
    ),
    (
        "host var provision_stack: false",
        {"host_vars": {"provision_stack": False, "provision_packages": ["minikernel"]}},
        (False, "host var provision_stack: false", ("minikernel",), "host var provision_packages"),
    ),
    (
        "host var provision_stack: true",
        {"host_vars": {"provision_stack": True}},
        (True, "host var provision_stack: true", (), "none named (--package, provision_packages)"),
    ),
    (
        "--stack forces it over the host var",
        {"host_vars": {"provision_stack": False}, "stack_flag": True},
        (True, "--stack", (), "none named (--package, provision_packages)"),
    ),
    (
        "--no-stack",
        {"no_stack_flag": True},
        (False, "--no-stack", (), "none named (--package, provision_packages)"),
    ),
    (
        "--package wins over provision_packages",
        {"host_vars": {"provision_packages": ["flash-attn"]}, "packages": ["minikernel"]},
        (True, "recipe r580's serving stack, by default", ("minikernel",), "--package"),
    ),
    (
        "an empty provision_packages names none",
        {"host_vars": {"provision_packages": []}},
        (
            True,
            "recipe r580's serving stack, by default",
            (),
            "none named (--package, provision_packages)",
        ),
    ),
    (
        "a recipe without a stack",
        {"has_stack": False},
        (False, "recipe r580 has no [stack]", (), "none named (--package, provision_packages)"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_provision_parts(case: tuple[str, dict[str, Any], tuple[Any, ...]]) -> None:
    _, given, want = case
    kwargs: dict[str, Any] = {"recipe": "r580", "has_stack": True, "host_vars": {}, **given}
    parts = provision_parts(**kwargs)
    assert (parts.stack, parts.stack_why, parts.builds, parts.builds_why) == want


ERRORS = [
    ({"stack_flag": True, "no_stack_flag": True}, "--stack and --no-stack both given: choose one"),
    (
        {"host_vars": {"provision_stack": "no"}},
        "host var provision_stack: expected true or false, got 'no'",
    ),
    ({"stack_flag": True, "has_stack": False}, "--stack: recipe r580 has no [stack]"),
]


@pytest.mark.parametrize(("given", "line"), ERRORS, ids=[e[1] for e in ERRORS])
def test_provision_parts_refuses_with_one_line(given: dict[str, Any], line: str) -> None:
    kwargs: dict[str, Any] = {"recipe": "r580", "has_stack": True, "host_vars": {}, **given}
    with pytest.raises(RecipeError) as exc:
        provision_parts(**kwargs)
    assert str(exc.value) == line


def test_both_flags_are_one_error_before_any_host(tmp_path: Path) -> None:
    """The real CLI: bad input (a flag conflict) is exit 1 with one JSON error, no host run
    (docs/failure-behaviour.md). Nothing simulated; no host is contacted."""
    proc = run_invoke(
        ["provision", "-H", "local", "--stack", "--no-stack", "--json"], invoke_env(None, tmp_path)
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout) == {
        "error": "--stack and --no-stack both given: choose one",
        "hosts": {},
    }
    assert not (tmp_path / "runs").exists()
