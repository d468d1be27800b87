"""A fleet of real OpenSSH servers on loopback, one per simulated GPU host.

Each host is a real `sshd` bound to its own 127.0.0.x address, with its own host key, HOME
and work_root, reached with a real key pair. Only the GPU is simulated (there is no GPU on
the machines that run the tests): each host has a stub `nvidia-smi` on its PATH that prints
real-format output for the driver and GPUs of its profile, and a file standing in for
`/proc/driver/nvidia/version` (pointed at by SM120KIT_NVIDIA_PROC_VERSION).
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: GPU profiles: what `nvidia-smi` and /proc/driver/nvidia/version say on a simulated host.
PROFILES: dict[str, dict[str, Any]] = {
    "pro6000x2": {
        "driver": "580.95.05",
        "cuda": "13.0",
        "open": True,
        "gpus": [
            {
                "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                "cap": "12.0",
                "mem": 97887,
                "bus": "00000000:01:00.0",
            },
            {
                "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                "cap": "12.0",
                "mem": 97887,
                "bus": "00000000:02:00.0",
            },
        ],
    },
    "rtx5090": {
        "driver": "570.124.06",
        "cuda": "12.8",
        "open": True,
        "gpus": [
            {
                "name": "NVIDIA GeForce RTX 5090",
                "cap": "12.0",
                "mem": 32607,
                "bus": "00000000:01:00.0",
            }
        ],
    },
    "a100_470": {
        "driver": "470.82.01",
        "cuda": "11.4",
        "open": False,
        "old": True,  # rejects compute_cap, like real 470 drivers
        "gpus": [
            {"name": "NVIDIA A100-SXM4-40GB", "cap": "8.0", "mem": 40536, "bus": "00000000:07:00.0"}
        ],
    },
    "nodriver": {"broken": True},  # nvidia-smi installed, no driver loaded
    "nogpu": {},  # no nvidia-smi at all
}

STUB = r'''#!{python} -S
"""Simulated nvidia-smi (tests only): prints real-format output from {data}."""
import json, sys
d = json.load(open({data!r}))
args = sys.argv[1:]
if d.get("broken"):
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.")
    sys.exit(9)
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
apps = next((a.split("=", 1)[1] for a in args if a.startswith("--query-compute-apps=")), None)
if apps is not None:
    # Processes holding GPU memory ("apps" of the profile: bus, pid, name, mem MiB).
    for app in d.get("apps", []):
        vals = {{
            "gpu_bus_id": app["bus"], "pid": str(app["pid"]), "process_name": app["name"],
            "used_memory": str(app["mem"]) + ("" if "nounits" in fmt else " MiB"),
        }}
        print(", ".join(vals[f.strip()] for f in apps.split(",")))
    sys.exit(0)
if query is None:
    if "--version" in args:
        print("NVIDIA-SMI version  : " + d["driver"])
        print("NVML version        : " + d["driver"].split(".")[0] + ".0")
        print("DRIVER version      : " + d["driver"])
        print("CUDA Version        : " + d["cuda"])
        sys.exit(0)
    print("+-----------------------------------------------------------------------------------------+")
    print("| NVIDIA-SMI {{0:<24}}Driver Version: {{0:<16}}CUDA Version: {{1:<9}}|".format(d["driver"], d["cuda"]))
    print("+-----------------------------------------------------------------------------------------+")
    sys.exit(0)
fields = [f.strip() for f in query.split(",")]
for f in fields:
    if f == "compute_cap" and d.get("old"):
        print('Field "compute_cap" is not a valid field to query.')
        print()
        print("Run 'nvidia-smi --help' for usage.")
        sys.exit(2)
nounits = "nounits" in fmt
for i, g in enumerate(d["gpus"]):
    vals = {{
        "index": str(i), "name": g["name"], "driver_version": d["driver"],
        "compute_cap": g["cap"], "pci.bus_id": g["bus"],
        "memory.total": str(g["mem"]) + ("" if nounits else " MiB"),
        "memory.used": str(g.get("used", 0)) + ("" if nounits else " MiB"),
        "utilization.gpu": "0" + ("" if nounits else " %"),
        "uuid": "GPU-00000000-0000-0000-0000-00000000000" + str(i),
    }}
    out = []
    for f in fields:
        if f not in vals:
            print('Field "%s" is not a valid field to query.' % f); sys.exit(2)
        out.append(vals[f])
    print(", ".join(out))
'''


def proc_version_line(profile: dict[str, Any]) -> str:
    """The first line of /proc/driver/nvidia/version for a profile, in the real format."""
    if profile.get("open"):
        return (
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {profile['driver']}  "
            "Release Build  (dvs-builder@U22-I3-AE18-23-3)  Wed Sep 24 23:11:25 UTC 2025"
        )
    return (
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {profile['driver']}  "
        "Tue Oct 26 21:52:33 UTC 2021"
    )


@dataclass
class SimHost:
    """One simulated host of the fleet."""

    name: str
    address: str
    profile: str
    root: Path = field(default=Path())
    live: bool = True
    proc: subprocess.Popen[bytes] | None = None

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def work_root(self) -> Path:
        return self.root / "work"

    @property
    def host_pub(self) -> Path:
        return self.root / "ssh_host_ed25519_key.pub"


def _free_port(addresses: list[str]) -> int:
    """A TCP port free on every given loopback address."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        ok = True
        for addr in addresses:
            with socket.socket() as s:
                try:
                    s.bind((addr, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return int(port)
    raise RuntimeError("no free port on the loopback addresses")


def _sshd_path() -> str:
    path = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if not path:
        raise RuntimeError("sshd not found: install openssh-server (.ci/run does)")
    return path


class Fleet:
    """Start/stop a set of sshd hosts and write an inventory and known_hosts for them."""

    def __init__(
        self,
        root: Path,
        hosts: list[tuple[str, str, str]],
        dead: list[tuple[str, str]] | None = None,
        sshd_options: dict[str, str] | None = None,
        host_env: dict[str, dict[str, str]] | None = None,
    ) -> None:
        self.root = root
        #: Extra sshd_config lines per host name (e.g. "MaxSessions 1").
        self.sshd_options = sshd_options or {}
        #: Extra session environment per host name (sshd SetEnv), e.g. its own TMPDIR.
        self.host_env = host_env or {}
        self.user = getpass.getuser()
        self.hosts = [SimHost(n, a, p, root / n) for n, a, p in hosts]
        self.dead = [SimHost(n, a, "nogpu", root / n, live=False) for n, a in (dead or [])]
        self.port = _free_port([h.address for h in self.hosts + self.dead])
        self.client_key = root / "client_ed25519"
        self.known_hosts = root / "known_hosts"
        self.inventory = root / "inventory" / "hosts.yaml"

    def by_name(self, name: str) -> SimHost:
        return next(h for h in self.hosts + self.dead if h.name == name)

    def start(self) -> Fleet:
        """Start every live host's sshd. Under pytest-xdist each worker starts its own fleet on
        the same addresses: the port is chosen again under a lock shared by every process on the
        machine, held until this fleet's sshds listen, so two fleets never pick one port."""
        lock_path = Path(tempfile.gettempdir()) / "sm120kit-test-fleet.lock"
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.port = _free_port([h.address for h in self.hosts + self.dead])
            return self._start()

    def _start(self) -> Fleet:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            # sshd's privilege separation needs this directory when it runs as root.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.client_key)], check=True
        )
        (self.root / "authorized_keys").write_text(Path(str(self.client_key) + ".pub").read_text())
        os.chmod(self.root / "authorized_keys", 0o600)
        known = []
        for h in self.hosts:
            self._prepare(h)
            known.append(
                f"[{h.address}]:{self.port} {h.host_pub.read_text().split(' ')[0]} "
                f"{h.host_pub.read_text().split(' ')[1]}"
            )
        self.known_hosts.write_text("\n".join(known) + "\n")
        for h in self.hosts:
            self._spawn(h)
        for h in self.hosts:
            self._wait(h)
        self.write_inventory()
        return self

    def _prepare(self, h: SimHost) -> None:
        for d in (h.root, h.home, h.work_root, h.root / "bin"):
            d.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-f",
                str(h.root / "ssh_host_ed25519_key"),
            ],
            check=True,
        )
        profile = PROFILES[h.profile]
        path_dirs = [
            str(h.root / "bin"),
            os.path.dirname(sys.executable),
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ]
        env = {"HOME": str(h.home), "PATH": ":".join(path_dirs)}
        if profile:
            data = h.root / "gpu.json"
            data.write_text(json.dumps(profile))
            stub = h.root / "bin" / "nvidia-smi"
            stub.write_text(STUB.format(python=sys.executable, data=str(data)))
            stub.chmod(0o755)
            if not profile.get("broken"):
                proc_file = h.root / "proc_driver_nvidia_version"
                proc_file.write_text(proc_version_line(profile) + "\nGCC version:  gcc 12\n")
                env["SM120KIT_NVIDIA_PROC_VERSION"] = str(proc_file)
        # No /proc file for hosts without a driver: point at a path that does not exist so the
        # machine's real /proc (if any) never leaks into a simulated host.
        env.setdefault("SM120KIT_NVIDIA_PROC_VERSION", str(h.root / "no-driver"))
        env.update(self.host_env.get(h.name, {}))
        config = f"""
ListenAddress {h.address}:{self.port}
HostKey {h.root}/ssh_host_ed25519_key
PidFile {h.root}/sshd.pid
AuthorizedKeysFile {self.root}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
MaxStartups 200
LogLevel ERROR
Subsystem sftp internal-sftp
SetEnv {" ".join(f"{k}={v}" for k, v in env.items())}
{self.sshd_options.get(h.name, "")}
"""
        (h.root / "sshd_config").write_text(config)

    def _spawn(self, h: SimHost) -> None:
        log = open(h.root / "sshd.log", "ab")
        h.proc = subprocess.Popen(
            [_sshd_path(), "-D", "-e", "-f", str(h.root / "sshd_config")], stdout=log, stderr=log
        )
        h.live = True

    def _wait(self, h: SimHost) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if h.proc is not None and h.proc.poll() is not None:
                raise RuntimeError(f"sshd for {h.name} exited: {(h.root / 'sshd.log').read_text()}")
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((h.address, self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"sshd for {h.name} did not start")

    @contextlib.contextmanager
    def gpu_profile(self, name: str, profile: dict[str, Any]) -> Iterator[None]:
        """Host `name`'s stub nvidia-smi prints `profile` inside the block, its own after."""
        data = self.by_name(name).root / "gpu.json"
        saved = data.read_text()
        data.write_text(json.dumps(profile))
        try:
            yield
        finally:
            data.write_text(saved)

    def stop_host(self, name: str) -> None:
        h = self.by_name(name)
        if h.proc is not None:
            h.proc.terminate()
            h.proc.wait(timeout=10)
            h.proc = None
        h.live = False

    def start_host(self, name: str) -> None:
        h = self.by_name(name)
        if h.proc is None:
            self._spawn(h)
            self._wait(h)

    def common_vars(self) -> dict[str, Any]:
        """Vars every fleet host shares (also given to ad hoc hosts through `all`)."""
        return {
            "ansible_user": self.user,
            "ansible_ssh_private_key_file": str(self.client_key),
            "ansible_python_interpreter": sys.executable,
        }

    def host_vars(self, h: SimHost) -> dict[str, Any]:
        return {
            "ansible_host": h.address,
            "ansible_port": self.port,
            "work_root": str(h.work_root),
        }

    def all_vars(self, h: SimHost) -> dict[str, Any]:
        """Everything needed to reach `h` without an inventory."""
        return {**self.common_vars(), **self.host_vars(h)}

    def write_inventory(self) -> Path:
        self.inventory.parent.mkdir(parents=True, exist_ok=True)
        hosts = {h.name: self.host_vars(h) for h in self.hosts + self.dead}
        by_profile: dict[str, dict[str, Any]] = {}
        for h in self.hosts:
            by_profile.setdefault(h.profile, {"hosts": {}})["hosts"][h.name] = None
        doc = {"all": {"vars": self.common_vars(), "hosts": hosts, "children": by_profile}}
        self.inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        return self.inventory

    def stop(self) -> None:
        for h in self.hosts:
            if h.proc is not None:
                h.proc.terminate()
        for h in self.hosts:
            if h.proc is not None:
                try:
                    h.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    h.proc.kill()
                h.proc = None


#: The test fleet: eight live hosts on 127.0.0.2-9 plus one address where nothing listens.
TEST_HOSTS = [
    ("gpu1", "127.0.0.2", "pro6000x2"),
    ("gpu2", "127.0.0.3", "rtx5090"),
    ("gpu3", "127.0.0.4", "nogpu"),
    ("gpu4", "127.0.0.5", "a100_470"),
    ("gpu5", "127.0.0.6", "nodriver"),
    ("gpu6", "127.0.0.7", "pro6000x2"),
    ("gpu7", "127.0.0.8", "rtx5090"),
    ("gpu8", "127.0.0.9", "pro6000x2"),
]
DEAD_HOSTS = [("ghost", "127.0.0.10")]


def fleet_of(n: int, root: Path, first: int = 2) -> Fleet:
    """`n` live pro6000x2 hosts on 127.0.0.<first>... (for benchmarks)."""
    hosts = [(f"h{i:02d}", f"127.0.0.{first + i}", "pro6000x2") for i in range(n)]
    return Fleet(root, hosts)
