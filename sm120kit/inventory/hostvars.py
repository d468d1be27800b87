"""The inventory variables the tool reads, with the type each must have.

`check_host_vars` runs where the inventory is loaded, on every host's merged variables (and on
the `all` variables that hosts outside the inventory get), so a value of the wrong type is one
error naming the file, line, host and key, before any host is touched, instead of being coerced
somewhere later (a string ``"True"`` silently not enabling a flag, a string package list split
into characters). Only types are checked here; what a path or a compiler must be is checked
where those values are used. ``recipe.<key>`` overrides are checked against the recipe schema
by `sm120kit.recipes.select`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sm120kit.errors import InventoryError

__all__ = ["HOST_VARS", "VarType", "check_host_vars"]


@dataclass(frozen=True)
class VarType:
    """One variable's type: a predicate, what it means in words, and whether null is allowed
    (null, like an absent var, means "use the default")."""

    ok: Callable[[Any], bool]
    expected: str
    nullable: bool = True


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_int(value: Any) -> bool:
    # bool is an int subclass; True as a job count is a typo, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_positive_int(value: Any) -> bool:
    return _is_int(value) and value >= 1


def _is_nonnegative_int(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _is_port(value: Any) -> bool:
    # Ansible accepts the port as a number or as digits in a string; so do we.
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return _is_int(value) and 0 < value < 65536


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_str_or_str_list(value: Any) -> bool:
    return isinstance(value, str) or _is_str_list(value)


def _is_str_or_number(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _is_str_or_int(value: Any) -> bool:
    return isinstance(value, str) or _is_int(value)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_mapping_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, Mapping) for item in value)


_STR = VarType(_is_str, "a string")
_STR_REQUIRED = VarType(_is_str, "a string", nullable=False)

#: Every inventory variable the tool reads, and its type. Where each is used:
#: connection (inventory/host.py, runner/connection.py), toolkit and env (ops/toolkit.py, ops/pyenv.py),
#: builds (plays/build.py and its ops/build_*.py, ops/compile.py), compile cache (builds/compile_cache.py), recipes (recipes/), smoke
#: (plays/smoke.py), wheel cache (cache/resolve.py, cache/election.py).
HOST_VARS: dict[str, VarType] = {
    "ansible_host": _STR_REQUIRED,
    "ansible_port": VarType(_is_port, "a port number 1-65535"),
    "ansible_user": _STR,
    "ansible_connection": _STR_REQUIRED,
    "ansible_ssh_private_key_file": _STR,
    "ansible_python_interpreter": _STR_REQUIRED,
    "work_root": _STR_REQUIRED,
    "target_driver": VarType(_is_str_or_int, 'a quoted string such as "580.95.05"'),
    "target_arch": VarType(_is_str_or_number, 'a compute capability such as "12.0"'),
    "provision_packages": VarType(_is_str_list, 'a list of package names such as ["flash-attn"]'),
    "max_jobs": VarType(_is_positive_int, "an integer >= 1"),
    "nvcc_threads": VarType(_is_positive_int, "an integer >= 1"),
    "oom_retries": VarType(_is_nonnegative_int, "an integer >= 0"),
    "nvcc_ccbin": _STR,
    "pip_args": VarType(_is_str_or_str_list, "a list of strings (or one shell-quoted string)"),
    "pip_cache_dir": _STR,
    "allow_cpu_torch": VarType(_is_bool, "true or false"),
    "provision_stack": VarType(_is_bool, "true or false"),
    "allow_system_python": VarType(_is_bool, "true or false"),
    "install_prerequisites": VarType(_is_bool, "true or false"),
    "build_host": _STR,
    "wheel_cache_stores": VarType(_is_mapping_list, "a list of store mappings"),
    "wheel_cache_host_store": VarType(_is_bool, "true or false"),
    "compile_cache": VarType(_is_bool, "true or false"),
    "compile_cache_size": VarType(_is_str, 'a size such as "10G" (sccache\'s spelling)'),
    "compile_cache_build_dir": _STR,
}


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_host_vars(host: str, values: Mapping[str, tuple[Any, str]]) -> None:
    """Raise InventoryError for the first known variable of the wrong type.

    `values` maps each variable to (value, where it was written: "file:line: key.path").
    """
    for key, (value, where) in values.items():
        spec = HOST_VARS.get(key)
        if spec is None or (value is None and spec.nullable) or spec.ok(value):
            continue
        raise InventoryError(
            f"{where}: host {host}: {key} must be {spec.expected}, got {_describe(value)}"
        )
