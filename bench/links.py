"""Shaped links for loopback hosts: each host's own link rate, both ways, with `tc` (issue 46).

On one machine every loopback host shares the same kernel and CPU: without shaping, what
decides the data time of N hosts is the CPU their hashing and unpacking share (2 cores
here), not the bytes. A LAN gives every host its own NIC; this gives each loopback address
its own link: a downlink (packets to the address, an HTB class on `lo`'s egress) and an
uplink (packets from it, redirected from `lo`'s ingress to an IFB device and shaped there),
each `mbps` megabits a second. The hosts' downloads leave from their own address
(`remote/lib/download.py` `loopback_source`), so index, peer and SSH bytes are all counted on
the links of the hosts they reach or leave. Traffic of any other address (127.0.0.1: the
controller and the index, other processes on the machine) matches no filter and is not
shaped. Needs root and `tc`; everything is removed on exit, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

IFB = "smk-fleet-ifb"


def _tc(*args: str, check: bool = True) -> None:
    proc = subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise SystemExit(f"tc {' '.join(args)}: {proc.stderr.strip()}")


def _ip(*args: str, check: bool = True) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise SystemExit(f"ip {' '.join(args)}: {proc.stderr.strip()}")


def _remove() -> None:
    # The ingress redirect first: with the IFB gone and the redirect left, lo would drop the
    # hosts' packets.
    _tc("qdisc", "del", "dev", "lo", "ingress", check=False)
    _tc("qdisc", "del", "dev", "lo", "root", check=False)
    _ip("link", "del", IFB, check=False)


@contextmanager
def shaped(addresses: list[str], mbps: float) -> Iterator[None]:
    """Each of `addresses` gets its own `mbps` link both ways for the block's duration."""
    if shutil.which("tc") is None:
        raise SystemExit("--link-mbps needs tc (iproute2) and root")
    probe = subprocess.run(["tc", "qdisc", "show", "dev", "lo"], capture_output=True, text=True)
    if "htb" in probe.stdout or "ingress" in probe.stdout:
        raise SystemExit("lo already has a shaping qdisc (another bench run?): not touching it")
    old = signal.getsignal(signal.SIGTERM)

    def on_term(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        rate = f"{mbps}mbit"
        _ip("link", "add", IFB, "type", "ifb")
        _ip("link", "set", IFB, "up")
        _tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb")
        _tc("qdisc", "add", "dev", IFB, "root", "handle", "1:", "htb")
        _tc("qdisc", "add", "dev", "lo", "handle", "ffff:", "ingress")
        for i, addr in enumerate(addresses):
            cls = f"1:{10 + i}"
            for dev, way in (("lo", "dst"), (IFB, "src")):
                _tc("class", "add", "dev", dev, "parent", "1:", "classid", cls, "htb",
                    "rate", rate, "ceil", rate)  # fmt: skip
                _tc("filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
                    "u32", "match", "ip", way, f"{addr}/32", "flowid", cls)  # fmt: skip
            _tc("filter", "add", "dev", "lo", "parent", "ffff:", "protocol", "ip", "prio", "1",
                "u32", "match", "ip", "src", f"{addr}/32",
                "action", "mirred", "egress", "redirect", "dev", IFB)  # fmt: skip
        yield
    finally:
        _remove()
        signal.signal(signal.SIGTERM, old)


def main() -> int:
    """``python3 bench/links.py --hosts A,B --mbps N -- CMD ...``: run CMD with those links
    shaped; ``--remove``: take away what a killed run left on lo."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="", help="comma-separated loopback addresses")
    parser.add_argument("--mbps", type=float, default=400.0, help="each host's link, Mbit/s")
    parser.add_argument("--remove", action="store_true", help="remove lo's shaping and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...: run shaped")
    args = parser.parse_args()
    if args.remove:
        _remove()
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.hosts or not command:
        parser.error("give --hosts and -- CMD (or --remove)")
    with shaped(args.hosts.split(","), args.mbps):
        return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
