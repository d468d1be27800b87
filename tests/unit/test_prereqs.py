"""sgl-kernel's host prerequisites: how a missing libnuma gets installed (the commands per
distro). The install itself is not run here: this machine has libnuma-dev (scripts/test.sh
installs it for the real-source configure tests), so the fleet never lacks it."""

from __future__ import annotations

from sm120kit.builds.cmake_config import numa_install_commands


def test_apt_hosts_get_libnuma_dev_through_sudo() -> None:
    facts = {"os": {"id": "ubuntu", "version_id": "24.04"}, "user": "deploy"}
    assert numa_install_commands(facts, "sudo -n ") == (
        "libnuma-dev",
        [
            "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
            "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y "
            "--no-install-recommends libnuma-dev",
        ],
    )


def test_dnf_hosts_get_numactl_devel_and_unknown_distros_nothing() -> None:
    assert numa_install_commands({"os": {"id": "rocky"}}, "") == (
        "numactl-devel",
        ["dnf install -y numactl-devel"],
    )
    assert numa_install_commands({"os": {"id": "arch"}}, "") is None
    assert numa_install_commands({}, "") is None
