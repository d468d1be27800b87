"""The inventory: its files (YAML, JSON, INI, group_vars/, host_vars/), host patterns, the
variables the tool reads, and the `Host` each machine becomes."""
