"""The Host: one machine as the inventory describes it (name, connection vars, merged vars)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
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
