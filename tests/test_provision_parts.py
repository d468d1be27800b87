"""`provision_parts`: what a host's provision does (the stack or not, which builds) and why,
from flags and host vars. A pure function: a table, no hosts, nothing simulated."""

from __future__ import annotations

from typing import Any

import pytest

from sm120kit.errors import RecipeError
from sm120kit.stack import provision_parts

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
