"""Probe an inference server from the host it runs on (stdlib only, Python 3.8+).

Two modes, chosen by the JSON argument's "mode":

- "poll": GET <url>/health and <url>/v1/models once each, with a short per-request
  timeout; says whether the server is ready and, if not, how it failed (refused, timed out,
  reset, HTTP status).
- "diagnose": one poll, then the evidence a person needs to tell "still warming up" from
  "hung after weight loading": the process that listens on the URL's port (or, when none
  does, candidate server processes by pid or command line), its children, their state, CPU
  time sampled twice (advancing or not), threads, RSS, listening ports, GPU utilisation
  when nvidia-smi exists, and `py-spy dump` stacks when py-spy can be found.

Sockets and processes come from /proc (Linux). Processes of other users are only partly
visible without root; the JSON says so rather than guessing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from sm120kit.remote.lib.proc import StepFailed, run

#: Command lines that look like an LLM server launch (used when nothing listens on the port).
DEFAULT_PROCESS_MATCH = (
    r"sglang|vllm|launch_server|uvicorn|text-generation-launcher|llama-server|trtllm-serve"
    r"|lmdeploy|tensorrt_llm"
)
STATE_NAMES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk sleep (uninterruptible)",
    "Z": "zombie",
    "T": "stopped",
    "t": "tracing stop",
    "X": "dead",
    "I": "idle",
}
MAX_CMDLINE = 400
MAX_PY_SPY_CHARS = 12000
MAX_PY_SPY_DUMPS = 16


# ---------------------------------------------------------------------------- poll


def _get(url, timeout):
    """One GET without proxies: {"status", "error", "detail", "body"}."""
    # Proxies from the environment must not see loopback URLs.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    out = {"status": None, "error": None, "detail": "", "body": None}
    try:
        with opener.open(req, timeout=timeout) as resp:
            out["status"] = resp.status
            out["body"] = resp.read(1 << 20).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        out["status"] = exc.code
        out["error"] = "http"
        out["detail"] = f"HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        # urllib wraps errors raised while connecting; a timeout here never got accepted.
        out["error"], out["detail"] = _classify(exc.reason, connecting=True)
    except Exception as exc:  # socket.timeout, ConnectionResetError, RemoteDisconnected...
        out["error"], out["detail"] = _classify(exc, connecting=False)
    return out


def _classify(exc, connecting):
    if isinstance(exc, ConnectionRefusedError):
        return "refused", "connection refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        if connecting:
            return "connect_timeout", "connect timed out (no answer to the TCP handshake)"
        return "timeout", "timed out (connection accepted, no answer)"
    if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
        return "reset", "connection reset by the server"
    name = type(exc).__name__
    if name == "RemoteDisconnected":
        return "reset", "server closed the connection without answering"
    if isinstance(exc, socket.gaierror):
        return "error", f"cannot resolve host: {exc}"
    return "error", f"{name}: {exc}" if str(exc) else name


def poll(url, request_timeout):
    """GET /health then /v1/models; ready when both answer (a 404 /health counts as absent)."""
    base = url.rstrip("/")
    health = _get(base + "/health", request_timeout)
    health.pop("body", None)
    result = {"mode": "poll", "url": url, "ready": False, "health": health, "models": None}
    # A refused or silent /health says all there is; do not spend another timeout on it.
    if health["error"] in ("refused", "connect_timeout", "timeout", "reset", "error"):
        result["error"] = "GET /health: " + health["detail"]
        return result
    models = _get(base + "/v1/models", request_timeout)
    body = models.pop("body", None)
    models["ids"] = None
    if models["status"] == 200 and body is not None:
        try:
            doc = json.loads(body)
            data = doc.get("data", []) if isinstance(doc, dict) else []
            models["ids"] = [str(m.get("id")) for m in data if isinstance(m, dict)]
        except ValueError:
            models["error"] = "error"
            models["detail"] = "/v1/models did not return JSON"
    result["models"] = models
    health_ok = health["status"] == 200 or health["status"] == 404
    result["ready"] = bool(health_ok and models["ids"] is not None)
    if result["ready"]:
        result["error"] = None
    elif not health_ok:
        result["error"] = "GET /health: " + health["detail"]
    else:
        result["error"] = "GET /v1/models: " + (models["detail"] or "no model list")
    return result


# ---------------------------------------------------------------------------- /proc


def _read(path, mode="r"):
    try:
        with open(path, mode) as fh:
            return fh.read()
    except OSError:
        return None


def _pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _stat(pid):
    """The fields of /proc/<pid>/stat after the command name (index 0 is the state)."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _cmdline(pid):
    raw = _read(f"/proc/{pid}/cmdline", "rb")
    if not raw:
        return []
    return [part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0")]


def _decode_addr(hexaddr):
    raw = bytes.fromhex(hexaddr)
    # /proc/net/tcp* prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(words) == 4 else socket.AF_INET6
    try:
        return socket.inet_ntop(family, words)
    except (ValueError, OSError):
        return hexaddr


def listening_sockets():
    """LISTEN TCP sockets: [{"port", "address", "inode"}] from /proc/net/tcp and tcp6."""
    found = []
    for name in ("tcp", "tcp6"):
        text = _read("/proc/net/" + name)
        if not text:
            continue
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":
                continue
            addr, _, port = fields[1].partition(":")
            found.append(
                {"port": int(port, 16), "address": _decode_addr(addr), "inode": int(fields[9])}
            )
    return found


def socket_owners(inodes):
    """Map socket inode -> pids holding it, for the processes this user can see into."""
    owners = {}
    wanted = set(inodes)
    if not wanted:
        return owners
    for pid in _pids():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd_dir + "/" + fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inode = int(link[8:-1])
                if inode in wanted:
                    owners.setdefault(inode, set()).add(pid)
    return owners


def _ancestors(pid):
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        stat = _stat(pid)
        if stat is None:
            break
        pid = int(stat[1])
    return seen


def _children_map():
    children = {}
    for pid in _pids():
        stat = _stat(pid)
        if stat is not None:
            children.setdefault(int(stat[1]), []).append(pid)
    return children


def _descendants(pid, children):
    out, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        if child in out:
            continue
        out.append(child)
        todo.extend(children.get(child, []))
    return out


def _cpu_seconds(stat, tck):
    return (int(stat[11]) + int(stat[12])) / float(tck)


# ---------------------------------------------------------------------------- tools


def _find_py_spy(explicit, pythons):
    if explicit:
        path = shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
        return path
    found = shutil.which("py-spy")
    if found:
        return found
    # Often installed into the server's own venv, which is not on PATH of a login shell.
    dirs = []
    for argv0, exe in pythons:
        if argv0.startswith("/"):
            dirs.append(os.path.dirname(argv0))
        if exe:
            dirs.append(os.path.dirname(exe))
    dirs.append(os.path.dirname(sys.executable))
    dirs.append(os.path.expanduser("~/.local/bin"))
    for folder in dirs:
        candidate = os.path.join(folder, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def _run(argv, timeout):
    """(stdout, None) of `argv`, or (None, why it failed)."""
    try:
        code, out, err = run(argv, timeout=timeout, merge=False)
    except (StepFailed, OSError) as exc:
        return None, str(exc)
    if code != 0:
        return None, (err.strip() or out.strip() or f"exit {code}")
    return out, None


def py_spy_dump(py_spy, pid, timeout):
    out, err = _run([py_spy, "dump", "--pid", str(pid)], timeout)
    if out is None:
        text = "py-spy failed: " + (err or "")
        if "ermission" in text or "ptrace" in text.lower():
            text += f" (needs the server's user or root: sudo py-spy dump --pid {pid})"
        return text[:MAX_PY_SPY_CHARS]
    return out[:MAX_PY_SPY_CHARS]


def gpu_info(nvidia_smi, timeout):
    """Per-GPU utilisation and memory, and GPU memory per pid; (None, None, note) without it."""
    path = shutil.which(nvidia_smi) or (nvidia_smi if os.access(nvidia_smi, os.X_OK) else None)
    if not path:
        return None, None, "nvidia-smi not found"
    out, err = _run(
        [
            path,
            "--query-gpu=index,utilization.gpu,memory.used",
            "--format=csv,noheader,nounits",
        ],
        timeout,
    )
    if out is None:
        return None, None, f"nvidia-smi failed: {err}"
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        gpus.append(
            {
                "index": _num(parts[0]),
                "utilization_pct": _num(parts[1]),
                "memory_used_mib": _num(parts[2]),
            }
        )
    per_pid = {}
    out, _ = _run(
        [path, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"], timeout
    )
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            mib = _num(parts[1])
            per_pid[int(parts[0])] = per_pid.get(int(parts[0]), 0) + (mib or 0)
    return gpus, per_pid, None


def _num(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


# ---------------------------------------------------------------------------- diagnose


def _port_of(url):
    parts = urllib.parse.urlsplit(url)
    if parts.port:
        return parts.port
    return 443 if parts.scheme == "https" else 80


_INTERPRETER = re.compile(r"(python|pypy)[0-9.]*[mdu]*$")
# Interpreter options that take a value (python -h): long ones as the next word, short ones
# as the rest of their word or the next word.
_VALUE_OPTIONS = {"--check-hash-based-pycs"}
_VALUE_LETTERS = "cmWX"


def launch_words(argv):
    """What a command line launches: its program's name and, for a Python interpreter, the
    module (`-m`) or script it runs. `python3 -m sglang.launch_server --model-path m` gives
    "python3 sglang.launch_server"; `python3 - '{"url": ".../sglang"}'` gives "python3"."""
    if not argv:
        return ""
    words = [os.path.basename(argv[0])]
    if not _INTERPRETER.match(words[0]):
        return words[0]
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "-" or not word.startswith("-"):
            if word != "-":
                words.append(word)  # the script
            break
        if word.startswith("--"):
            i += 2 if word in _VALUE_OPTIONS else 1
            continue
        # Short options combine as the interpreter parses them (`-um mod`, `-Bc code`,
        # `-Wignore`): flags until one that takes a value, which is the rest of the word or
        # the next one.
        for j, letter in enumerate(word[1:], start=2):
            if letter in _VALUE_LETTERS:
                value = word[j:] if j < len(word) else (argv[i + 1] if i + 1 < len(argv) else "")
                i += 1 if j < len(word) else 2
                if letter == "m":
                    return " ".join(words + [value] if value else words)
                if letter == "c":
                    return " ".join(words)
                break
        else:
            i += 1
    return " ".join(words)


def url_addresses(url):
    """The addresses the URL's host name resolves to on this host (empty when it does not)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return set()
    return {info[4][0].split("%", 1)[0] for info in infos}


#: Listening on every address of its family: such a socket receives the URL's connections.
_WILDCARDS = ("0.0.0.0", "::")


def serves_url(address, addresses):
    """Whether a socket listening on `address` receives connections to `addresses` (the URL
    host's): the same address, a wildcard, or an IPv4 address in its IPv6-mapped form. A
    listener on the same port at another address of the host (127.0.0.2 when the URL says
    127.0.0.1) is another process's, and is no evidence about the server."""
    if address in _WILDCARDS or address in addresses:
        return True
    return address.startswith("::ffff:") and address[7:] in addresses


def _select(port, listeners, owners, args, me, *, addresses=None, exists=None, processes=None):
    """Server pids to report, how they were found, and the named pids that do not exist.

    Only what is proven to be the server counts, in this order: the pids the caller names
    (`--pid`, or the server serve-check just launched); else the processes `--process-match`
    names; else the owner of a socket listening on the URL's port at an address the URL
    reaches; else the default launch pattern. A named pid that does not exist is reported
    missing, never replaced by whatever holds the port. `addresses`, `exists` and
    `processes` (pid -> argv) default to this host's (tests pass their own).
    """
    exists = exists or (lambda pid: os.path.isdir(f"/proc/{pid}"))
    named = [int(p) for p in args.get("pids") or ([args["pid"]] if args.get("pid") else [])]
    if named:
        found = {pid for pid in named if exists(pid)}
        missing = [pid for pid in named if pid not in found]
        how = "pid " + ", ".join(str(p) for p in sorted(found)) if found else None
        return found - me, how, missing
    pattern = args.get("process_match")
    if not pattern:
        addresses = url_addresses(args["url"]) if addresses is None else addresses
        pids = set()
        for sock in listeners:
            if sock["port"] == port and serves_url(sock["address"], addresses):
                pids.update(owners.get(sock["inode"], ()))
        if pids - me:
            return pids - me, f"listening on port {port}", []
    # A pattern of the user's is theirs to aim: it sees the whole command line. The default
    # sees only what a command launches, so a build whose arguments name sglang's
    # repository, an editor or a grep is not taken for a server.
    text = " ".join if pattern else launch_words
    regex = re.compile(pattern or DEFAULT_PROCESS_MATCH)
    if processes is None:
        processes = {pid: _cmdline(pid) for pid in _pids() if pid not in me}
    pids = {pid for pid, argv in processes.items() if argv and regex.search(text(argv))}
    how = (
        f"command line matches {pattern!r}"
        if pattern
        else f"launches a program or module matching {DEFAULT_PROCESS_MATCH!r}"
    )
    return pids - me, how, []


def diagnose(args):
    url = args["url"]
    port = _port_of(url)
    request_timeout = float(args.get("request_timeout", 3.0))
    sample_s = float(args.get("sample_s", 1.0))
    threshold = float(args.get("cpu_threshold", 0.05))
    tck = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    me = _ancestors(os.getpid())

    first_poll = poll(url, request_timeout)
    listeners = listening_sockets()
    owners = socket_owners(s["inode"] for s in listeners)
    addresses = url_addresses(url)
    roots, how, missing = _select(port, listeners, owners, args, me, addresses=addresses)
    # Only a listener at an address the URL reaches is the URL's port.
    at_url = [s for s in listeners if s["port"] == port and serves_url(s["address"], addresses)]
    children = _children_map()
    # Report each tree once: a selected pid under another selected pid is its child.
    roots = sorted(p for p in roots if not (_ancestors(p) - {p}) & roots)
    trees = [(root, [d for d in _descendants(root, children) if d not in me]) for root in roots]
    watched = [p for root, desc in trees for p in [root] + desc]

    before = {}
    t0 = time.time()
    for pid in watched:
        stat = _stat(pid)
        if stat is not None:
            before[pid] = _cpu_seconds(stat, tck)
    time.sleep(sample_s)
    elapsed = max(time.time() - t0, 1e-3)

    pid_ports = {}
    for sock in listeners:
        for pid in owners.get(sock["inode"], ()):
            pid_ports.setdefault(pid, set()).add(sock["port"])
    uptime = float((_read("/proc/uptime") or "0").split()[0])
    gpus, gpu_mem, gpu_note = gpu_info(args.get("nvidia_smi") or "nvidia-smi", 20)

    def describe(pid):
        stat = _stat(pid)
        argv = _cmdline(pid)
        info = {"pid": pid, "cmdline": " ".join(argv)[:MAX_CMDLINE]}
        if stat is None:
            info.update({"state": "gone", "state_name": "exited during the probe"})
            return info
        cpu = _cpu_seconds(stat, tck)
        delta = cpu - before.get(pid, cpu)
        exe = None
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            pass
        info.update(
            {
                "ppid": int(stat[1]),
                "exe": exe,
                "state": stat[0],
                "state_name": STATE_NAMES.get(stat[0], stat[0]),
                "wchan": (_read(f"/proc/{pid}/wchan") or "").strip() or None,
                "cpu_seconds": round(cpu, 2),
                "cpu_percent": round(100.0 * delta / elapsed, 1),
                "cpu_advancing": pid in before and delta / elapsed >= threshold,
                "threads": int(stat[17]),
                "rss_mib": round(int(stat[21]) * page / 1048576.0, 1),
                "age_s": round(max(uptime - int(stat[19]) / float(tck), 0.0), 1),
                "listening": sorted(pid_ports.get(pid, ())),
                "gpu_memory_mib": (gpu_mem or {}).get(pid),
                "py_spy": None,
            }
        )
        return info

    processes = []
    for root, desc in trees:
        entry = describe(root)
        entry["children"] = [describe(pid) for pid in desc]
        processes.append(entry)

    pythons = []
    for entry in processes:
        for proc in [entry] + entry["children"]:
            if _is_python(proc):
                argv0 = proc["cmdline"].split(" ", 1)[0]
                pythons.append((argv0, proc.get("exe")))
    py_spy = None
    if args.get("py_spy", True):
        py_spy = _find_py_spy(args.get("py_spy_path"), pythons)
    if py_spy:
        budget = MAX_PY_SPY_DUMPS
        for entry in processes:
            for proc in [entry] + entry["children"]:
                if budget and proc["state"] not in ("gone", "Z") and _is_python(proc):
                    proc["py_spy"] = py_spy_dump(py_spy, proc["pid"], 20)
                    budget -= 1

    listening = []
    for sock in sorted(listeners, key=lambda s: (s["port"], s["address"])):
        pids = sorted(owners.get(sock["inode"], ()))
        listening.append({"port": sock["port"], "address": sock["address"], "pids": pids})
    return {
        "mode": "diagnose",
        "url": url,
        "port": port,
        "poll": first_poll,
        "found_by": how,
        "missing_pids": missing,
        "processes": processes,
        "port_open": bool(at_url),
        "port_owner_visible": any(owners.get(s["inode"]) for s in at_url),
        "listening_ports": listening,
        "gpu": gpus,
        "gpu_note": gpu_note,
        "py_spy_available": bool(py_spy),
        "py_spy_path": py_spy,
        "sample_s": round(elapsed, 2),
        "cpu_threshold": threshold,
        "uid": os.getuid(),
    }


def _is_python(proc):
    exe = os.path.basename(proc.get("exe") or "")
    argv0 = os.path.basename(proc["cmdline"].split(" ", 1)[0])
    return "python" in exe or "python" in argv0


def main(argv):
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    mode = args.get("mode", "poll")
    if mode == "poll":
        result = poll(args["url"], float(args.get("request_timeout", 3.0)))
    elif mode == "diagnose":
        result = diagnose(args)
    else:
        result = {"error": f"unknown mode {mode!r}"}
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
