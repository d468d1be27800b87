"""known_hosts read as OpenSSH reads it (issue #45 class 6), compared with OpenSSH itself.

Each case writes a real known_hosts file; the verdict of our connection (accept / changed /
revoked / unknown) must equal that of a real `ssh -o StrictHostKeyChecking=yes` against the
same real loopback sshd (tests/support/fleet.py), and the lines we take as naming the host
must be those `ssh-keygen -F` finds. Nothing is simulated here.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sm120kit.cache import sftp
from sm120kit.cache.store import CacheError
from sm120kit.errors import HostUnreachable
from sm120kit.inventory.host import Host
from sm120kit.runner import known_hosts as kh
from sm120kit.runner.connection import ConnectOptions, connect
from tests.support.fleet import Fleet

HOST = "gpu1"


def _key(pub: Path) -> str:
    return " ".join(pub.read_text().split()[:2])


def _hashed(tmp: Path, line: str) -> str:
    f = tmp / "to_hash"
    f.write_text(line + "\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(f)], check=True, capture_output=True)
    return f.read_text().strip()


def _rsa(tmp: Path) -> str:
    key = tmp / "rsa_key"
    if not key.exists():
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(key)], check=True
        )
    return _key(Path(str(key) + ".pub"))


def _bare(name: str) -> str:
    return name[1:].split("]")[0]


# Each case: (id, lines) where lines gets (name, right key, wrong key, tmp) and writes the file.
Case = Callable[[str, str, str, Path], list[str]]
CASES: list[tuple[str, Case]] = [
    ("right", lambda n, r, w, t: [f"{n} {r}"]),
    ("wrong", lambda n, r, w, t: [f"{n} {w}"]),
    ("wrong-then-right", lambda n, r, w, t: [f"{n} {w}", f"{n} {r}"]),
    ("right-then-wrong", lambda n, r, w, t: [f"{n} {r}", f"{n} {w}"]),
    ("ca-line-then-right", lambda n, r, w, t: [f"@cert-authority * {w}", f"{n} {r}"]),
    ("ca-line-only", lambda n, r, w, t: [f"@cert-authority {n} {r}"]),
    ("revoked-and-right", lambda n, r, w, t: [f"{n} {r}", f"@revoked * {r}"]),
    ("revoked-other-host", lambda n, r, w, t: [f"@revoked other.example {r}", f"{n} {r}"]),
    ("revoked-wrong-key", lambda n, r, w, t: [f"@revoked {n} {w}", f"{n} {r}"]),
    (
        "comments-blank-garbage",
        lambda n, r, w, t: [
            "# a comment",
            "",
            "   ",
            "garbage",
            f"{n} ssh-ed25519 not*base64",
            f"@bogus {n} {w}",
            f"{n} ssh-ed25519",
            f"{n} {r} trailing comment",
        ],
    ),
    ("hashed-right", lambda n, r, w, t: [_hashed(t, f"{n} {r}")]),
    ("hashed-wrong", lambda n, r, w, t: [_hashed(t, f"{n} {w}")]),
    ("star", lambda n, r, w, t: [f"* {r}"]),
    ("question-mark", lambda n, r, w, t: [f"{n[:-1]}? {r}"]),
    ("bracket-star", lambda n, r, w, t: [f"[127.0.0.*]:{n.rsplit(':', 1)[1]} {r}"]),
    ("list-with-match", lambda n, r, w, t: [f"other.example,{n} {r}"]),
    ("negated", lambda n, r, w, t: [f"*,!{n} {r}"]),
    ("negated-other", lambda n, r, w, t: [f"*,!other.example {r}"]),
    ("negated-wins-over-wrong", lambda n, r, w, t: [f"*,!{n} {w}", f"{n} {r}"]),
    ("no-port", lambda n, r, w, t: [f"{_bare(n)} {r}"]),
    ("no-port-wrong", lambda n, r, w, t: [f"{_bare(n)} {w}"]),
    ("no-port-revoked", lambda n, r, w, t: [f"{_bare(n)} {r}", f"@revoked {_bare(n)} {r}"]),
    ("port-wrong-bare-right", lambda n, r, w, t: [f"{n} {w}", f"{_bare(n)} {r}"]),
    ("other-type-only", lambda n, r, w, t: [f"{n} {_rsa(t)}"]),
    ("other-type-and-wrong", lambda n, r, w, t: [f"{n} {_rsa(t)}", f"{n} {w}"]),
    ("empty", lambda n, r, w, t: []),
]


def _ssh_verdict(fleet: Fleet, known: Path, address: str) -> str:
    proc = subprocess.run(
        [
            "ssh",
            "-F",
            "/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={known}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=20",
            "-i",
            str(fleet.client_key),
            "-p",
            str(fleet.port),
            "-l",
            fleet.user,
            address,
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode == 0:
        return "accept"
    if "REVOKED" in proc.stderr:
        return "revoked"
    if "HAS CHANGED" in proc.stderr:
        return "changed"
    if "host key is known" in proc.stderr or "verification failed" in proc.stderr:
        return "unknown"
    raise AssertionError(f"ssh: {proc.stderr}")


def _our_verdict(fleet: Fleet, known: Path) -> tuple[str, str]:
    sim = fleet.by_name(HOST)
    host = Host(name=HOST, vars=fleet.all_vars(sim))
    conn = connect(host, ConnectOptions(known_hosts=str(known), connect_retries=1))
    try:
        conn.open()
    except HostUnreachable as exc:
        text = str(exc)
        for word, verdict in (("REVOKED", "revoked"), ("CHANGED", "changed")):
            if word in text:
                return verdict, text
        if "is not in" in text:
            return "unknown", text
        raise
    conn.close()
    return "accept", ""


def _keygen_lines(known: Path, name: str) -> set[int]:
    proc = subprocess.run(
        ["ssh-keygen", "-F", name, "-f", str(known)], capture_output=True, text=True
    )
    return {int(m) for m in re.findall(r"found: line (\d+)", proc.stdout)}


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_verdict_matches_openssh(fleet: Fleet, tmp_path: Path, case: Case) -> None:
    sim = fleet.by_name(HOST)
    name = kh.host_name(sim.address, fleet.port)
    right = _key(sim.host_pub)
    wrong = _key(fleet.by_name("gpu2").host_pub)
    known = tmp_path / "known_hosts"
    known.write_text("".join(line + "\n" for line in case(name, right, wrong, tmp_path)))
    ours, message = _our_verdict(fleet, known)
    assert ours == _ssh_verdict(fleet, known, sim.address), known.read_text()
    if ours in ("revoked", "changed"):
        assert str(known) in message and "line " in message
    # ssh-keygen -F also lists lines whose key does not parse (ssh skips them): compare on the
    # lines that carry a key.
    entries = kh.parse(known.read_text())
    matched = {e.line for e in entries if kh.host_matches(e.hosts, name)}
    found = _keygen_lines(known, name) & {e.line for e in entries}
    assert matched == found, known.read_text()


def test_accept_new_records_and_still_refuses_revoked(fleet: Fleet, tmp_path: Path) -> None:
    sim = fleet.by_name(HOST)
    name = kh.host_name(sim.address, fleet.port)
    host = Host(name=HOST, vars=fleet.all_vars(sim))
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority *.example {_key(sim.host_pub)}\n")
    options = ConnectOptions(known_hosts=str(known), connect_retries=1, accept_new_host_keys=True)
    first = connect(host, options)
    first.open()
    first.close()
    assert known.read_text().splitlines()[-1].startswith(f"{name} ssh-ed25519 ")
    known.write_text(f"@revoked {name} {_key(sim.host_pub)}\n")
    with pytest.raises(HostUnreachable, match="REVOKED"):
        connect(host, options).open()


def _sftp_store_verdict(fleet: Fleet, known: Path) -> str:
    sim = fleet.by_name(HOST)
    spec = {
        "host": sim.address, "port": fleet.port, "user": fleet.user,
        "key_filename": str(fleet.client_key), "known_hosts": str(known),
    }  # fmt: skip
    try:
        client = sftp.paramiko_connect(spec)
    except CacheError as exc:
        text = str(exc)
        assert "Incorrect padding" not in text and "\n" not in text, text
        for word, verdict in (("REVOKED", "revoked"), ("CHANGED", "changed")):
            if word in text:
                return verdict
        assert "is not in" in text, text
        return "unknown"
    client.close()
    return "accept"


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_the_sftp_store_reads_known_hosts_as_openssh(
    fleet: Fleet, tmp_path: Path, case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SFTP cache store's own paramiko client (sm120kit/cache/sftp.py) judges host keys
    with the same reader: its verdict equals a real ssh's for every case (markers included).
    The user's file is left out on both sides (HOME here is empty)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    sim = fleet.by_name(HOST)
    name = kh.host_name(sim.address, fleet.port)
    right = _key(sim.host_pub)
    wrong = _key(fleet.by_name("gpu2").host_pub)
    known = tmp_path / "known_hosts"
    known.write_text("".join(line + "\n" for line in case(name, right, wrong, tmp_path)))
    assert _sftp_store_verdict(fleet, known) == _ssh_verdict(fleet, known, sim.address)
