"""The Host: one machine as the inventory describes it (name, connection vars, merged vars)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# DEFAULT_WORK_ROOT: where everything the tool keeps on a host lives, unless the host var
# `work_root` says otherwise (shared with remote/facts_probe.py).
from ..remote.lib.names import DEFAULT_WORK_ROOT


@dataclass
class Host:
    """A resolved inventory host.

    `vars` holds the merged variables (Ansible precedence already applied); `var_sources`
    maps each var name to a short human description of where its winning value came from
    (e.g. ``"inventory/group_vars/gpus.yaml"`` or ``"inventory/hosts.yaml: host gpu1"``).
    """

    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    groups: list[str] = field(default_factory=list)
    var_sources: dict[str, str] = field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        """True when the host is this machine, reached without SSH."""
        return str(self.vars.get("ansible_connection", "ssh")) == "local"

    @property
    def address(self) -> str:
        return str(self.vars.get("ansible_host", self.name))

    @property
    def port(self) -> int | None:
        port = self.vars.get("ansible_port")
        return int(port) if port not in (None, "") else None

    @property
    def user(self) -> str | None:
        user = self.vars.get("ansible_user")
        return str(user) if user not in (None, "") else None

    @property
    def key_file(self) -> str | None:
        key = self.vars.get("ansible_ssh_private_key_file")
        return os.path.expanduser(str(key)) if key not in (None, "") else None

    @property
    def python(self) -> str:
        """Interpreter used to run the stdlib-only remote scripts."""
        return str(self.vars.get("ansible_python_interpreter", "python3"))

    @property
    def work_root(self) -> str:
        """Per-host root of every path the tool uses there (may start with ~, expanded remotely)."""
        return str(self.vars.get("work_root", DEFAULT_WORK_ROOT))

    def display(self) -> str:
        if self.is_local:
            return f"{self.name} (local)"
        where = self.address + (f":{self.port}" if self.port else "")
        return f"{self.name} ({self.user + '@' if self.user else ''}{where})"


# A host name becomes a file name on the controller (`<run_dir>/<host>.log`, build logs
# `<host>-build-<name>.log`), so it must be one safe path component; 200 bytes leaves room for
# the longest suffix under the usual 255-byte NAME_MAX.
HOST_NAME_MAX_BYTES = 200


def unsafe_host_name(name: str) -> str | None:
    """Why ``name`` cannot be a host name (a file name on the controller), or None if it can."""
    if name in ("", ".", ".."):
        return "not a file name"
    if "/" in name or "\\" in name:
        return "contains a path separator"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "contains a control character"
    if name.startswith("-"):
        return "starts with '-'"
    if len(name.encode("utf-8", errors="replace")) > HOST_NAME_MAX_BYTES:
        return f"longer than {HOST_NAME_MAX_BYTES} bytes"
    return None


def host_file(directory: str | os.PathLike[str], name: str, suffix: str) -> Path:
    """``directory/<name><suffix>``: the one place a host name is joined into a path. Names are
    checked at inventory load; this refuses again so no caller can escape ``directory``."""
    problem = unsafe_host_name(name)
    if problem or "/" in suffix:
        raise ValueError(f"host name {name!r} is not safe as a file name: {problem or suffix}")
    return Path(directory) / f"{name}{suffix}"
