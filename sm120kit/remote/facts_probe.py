"""Gather what a host is, in one run: OS, CPU, memory, disk, compilers, Pythons, GPUs, CUDA.

Runs on the host with any Python >= 3.8 and the standard library only. Arguments (argv[1],
JSON): {"work_root": "~/.sm120kit"}. Prints one JSON document. Nothing here changes the host.
"""

import glob
import json
import os
import platform
import pwd
import re
import shutil
import socket
import subprocess
import sys

from sm120kit.remote.lib.cudalibs import toolkit_components
from sm120kit.remote.lib.names import CUDA_VERSION_JSON, DEFAULT_WORK_ROOT, cuda_xy


def sh(argv, timeout=20):
    """Run a program; (exit code, stdout, stderr). A missing program is exit 127."""
    try:
        p = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            text=True,
        )
        return p.returncode, p.stdout, p.stderr
    except FileNotFoundError:
        return 127, "", "not found"
    except subprocess.TimeoutExpired:
        return 124, "", "timed out"
    except OSError as exc:
        return 126, "", str(exc)


def os_release():
    info = {}
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path) as fh:
                for line in fh:
                    if "=" in line:
                        k, v = line.rstrip("\n").split("=", 1)
                        info[k] = v.strip().strip('"')
            break
        except OSError:
            continue
    return {
        "id": info.get("ID"),
        # ID_LIKE: the family (debian, rhel fedora) that picks apt or dnf for a missing Python.
        "id_like": info.get("ID_LIKE"),
        "version_id": info.get("VERSION_ID"),
        "codename": info.get("VERSION_CODENAME"),
        "pretty": info.get("PRETTY_NAME") or platform.system(),
    }


def meminfo():
    values = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                key, rest = line.split(":", 1)
                values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"total_bytes": values.get("MemTotal"), "available_bytes": values.get("MemAvailable")}


def cpu():
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    model = None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"count": usable, "online": os.cpu_count(), "model": model}


def disk(work_root):
    probe = work_root
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        usage = shutil.disk_usage(probe or "/")
        return {"path": probe, "free_bytes": usage.free, "total_bytes": usage.total}
    except OSError as exc:
        return {"path": probe, "error": str(exc)}


def glibc():
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION")  # e.g. "glibc 2.36"
        if text:
            return text.split()[-1]
    except (ValueError, OSError, AttributeError):
        pass
    lib, version = platform.libc_ver()
    return version or None


def path_dirs():
    return [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]


def find_versioned(prefix, pattern):
    """Every `prefix` and `prefix-N`/`prefixN.M` on PATH, by resolved path, first wins."""
    seen, found = set(), []
    for d in path_dirs():
        for path in sorted(glob.glob(os.path.join(d, prefix + "*"))):
            name = os.path.basename(path)
            if not re.match(pattern, name) or not os.access(path, os.X_OK):
                continue
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            found.append(path)
    return found


def compilers():
    out = []
    for path in find_versioned("gcc", r"^gcc(-\d+)?$"):
        code, stdout, _ = sh([path, "-dumpfullversion", "-dumpversion"])
        if code == 0 and stdout.strip():
            out.append({"path": path, "version": stdout.strip().splitlines()[0]})
    return out


def is_elf(path):
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def pyenv_versions(root):
    """The versions pyenv selects here, as pyenv does: PYENV_VERSION, else the nearest
    .python-version up from the working directory, else $PYENV_ROOT/version."""
    if os.environ.get("PYENV_VERSION"):
        return os.environ["PYENV_VERSION"].split(":")
    here = os.getcwd()
    files = []
    while True:
        files.append(os.path.join(here, ".python-version"))
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    files.append(os.path.join(root, "version"))
    for name in files:
        try:
            with open(name) as fh:
                found = [w for line in fh for w in line.split() if not w.startswith("#")]
        except OSError:
            continue
        if found:
            return found
    return ["system"]


def pyenv_target(path):
    """The interpreter a pyenv shim would run, without running it (each shim starts bash and
    pyenv: a second or more apiece, and a pyenv install has a shim per Python it knows).
    None: not a pyenv shim, or it selects the system Python (then run it to find out);
    "": no selected version has this program, so the shim would fail."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1024).decode("utf-8", "replace")
    except OSError:
        return None
    root = re.search(r'export PYENV_ROOT="([^"]+)"', head)
    if not root or 'pyenv" exec' not in head:
        return None
    versions = pyenv_versions(root.group(1))
    if "system" in versions:
        return None
    for version in versions:
        target = os.path.join(root.group(1), "versions", version, "bin", os.path.basename(path))
        if os.access(target, os.X_OK):
            return target
    return ""


def pythons():
    """Python 3 interpreters on PATH. Versions come from the resolved file name (python3.11)
    rather than by running each one: a process per interpreter would dominate the probe."""
    out, seen = [], set()
    for path in find_versioned("python3", r"^python3(\.\d+)?$"):
        real = os.path.realpath(path)
        if not is_elf(real):
            target = pyenv_target(real)
            if target == "":
                continue
            if target:
                real = os.path.realpath(target)
        match = re.match(r"^python(3\.\d+)$", os.path.basename(real)) or re.match(
            r"^python(3\.\d+)$", os.path.basename(path)
        )
        if real == os.path.realpath(sys.executable):
            version = "%d.%d.%d" % sys.version_info[:3]
        elif match and is_elf(real):  # wrappers (pyenv shims) may run another version
            version = match.group(1)
        else:
            code, stdout, _ = sh(
                [path, "-c", "import sys;print('%d.%d.%d' % sys.version_info[:3])"]
            )
            if code != 0:
                continue
            version = stdout.strip()
        if (real, version) in seen:
            continue
        seen.add((real, version))
        out.append({"path": path, "version": version})
    return out


def proc_driver():
    # SM120KIT_NVIDIA_PROC_VERSION exists so simulated test hosts can stand in for /proc.
    path = os.environ.get("SM120KIT_NVIDIA_PROC_VERSION") or "/proc/driver/nvidia/version"
    try:
        with open(path) as fh:
            line = fh.readline().strip()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", line)
    return {
        "line": line,
        "version": match.group(1) if match else None,
        "module": "open" if "Open Kernel Module" in line else "proprietary",
    }


GPU_FIELDS = [
    "index",
    "name",
    "driver_version",
    "compute_cap",
    "memory.total",
    "memory.used",
    "pci.bus_id",
]
APP_FIELDS = ["gpu_bus_id", "pid", "process_name", "used_memory"]


def _mib(text):
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return None


def compute_apps(smi):
    """Processes holding GPU memory: [{"bus_id", "pid", "name", "memory_mib"}], or None."""
    code, out, _err = sh(
        [smi, "--query-compute-apps=" + ",".join(APP_FIELDS), "--format=csv,noheader,nounits"]
    )
    if code != 0:
        return None
    apps = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(APP_FIELDS) or not parts[1].isdigit():
            continue
        apps.append(
            {
                "bus_id": parts[0],
                "pid": int(parts[1]),
                "name": parts[2],
                "memory_mib": _mib(parts[3]),
            }
        )
    return apps


def gpus():
    smi = shutil.which("nvidia-smi")
    result = {
        "present": False,
        "nvidia_smi": smi,
        "driver_version": None,
        "module": None,
        "gpus": [],
        "error": None,
        "notes": [],
    }
    kernel = proc_driver()
    if kernel:
        result["module"] = kernel["module"]
        result["kernel_module_line"] = kernel["line"]
    if not smi:
        result["error"] = "nvidia-smi not found"
        if kernel:
            result["driver_version"] = kernel["version"]
        return result
    fields = list(GPU_FIELDS)
    code, out, err = sh([smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"])
    if code != 0 and "compute_cap" in (out + err):
        # Drivers older than ~510 do not know the field: ask without it, say the capability is unknown.
        fields.remove("compute_cap")
        result["notes"].append(
            "driver rejects compute_cap (too old to report compute capability): capability unknown"
        )
        code, out, err = sh(
            [smi, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
        )
    if code != 0:
        message = (out.strip() or err.strip() or "exit %d" % code).splitlines()[0]
        result["error"] = "nvidia-smi cannot talk to a driver: " + message
        if kernel:
            result["driver_version"] = kernel["version"]
        return result
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields):
            continue
        row = dict(zip(fields, parts))
        mem = _mib(row["memory.total"])
        cap = row.get("compute_cap")
        result["gpus"].append(
            {
                "index": int(row["index"]),
                "name": row["name"],
                "compute_cap": cap if cap and cap not in ("[N/A]", "N/A") else None,
                "memory_mib": mem,
                "memory_used_mib": _mib(row.get("memory.used")),
                "bus_id": row.get("pci.bus_id"),
            }
        )
        result["driver_version"] = row["driver_version"]
    result["present"] = bool(result["gpus"])
    if result["present"]:
        # The memory an old server (or anyone) still holds, by process: preflight names them.
        apps = compute_apps(smi)
        by_bus = {(g["bus_id"] or "").lower(): g for g in result["gpus"]}
        for app in apps or []:
            gpu = by_bus.get(app["bus_id"].lower())
            if gpu is not None:
                gpu.setdefault("processes", []).append(app)
        for gpu in result["gpus"]:
            gpu.setdefault("processes", [] if apps is not None else None)
    if (
        kernel
        and kernel["version"]
        and result["driver_version"]
        and kernel["version"] != result["driver_version"]
    ):
        result["notes"].append(
            "nvidia-smi reports driver %s but the kernel module is %s (mismatched userland)"
            % (result["driver_version"], kernel["version"])
        )
    return result


def nvcc_version(nvcc):
    code, out, _ = sh([nvcc, "--version"])
    if code != 0:
        return None, None
    m = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", out)
    return (m.group(1), m.group(2)) if m else (None, None)


def toolkit(root, source):
    root = os.path.realpath(root)
    nvcc = os.path.join(root, "bin", "nvcc")
    entry = {
        "path": root,
        "source": source,
        "version": None,
        "nvcc": None,
        "nvcc_release": None,
        "nvcc_version": None,
    }
    recorded_nvcc = None
    try:
        with open(os.path.join(root, CUDA_VERSION_JSON)) as fh:
            info = json.load(fh)
        entry["version"] = info.get("cuda", {}).get("version")
        recorded_nvcc = info.get("cuda_nvcc", {}).get("version")
    except (OSError, ValueError, AttributeError):
        pass
    if os.access(nvcc, os.X_OK):
        entry["nvcc"] = nvcc
        if recorded_nvcc and re.match(r"^\d+\.\d+\.\d+$", recorded_nvcc):
            # version.json records nvcc's version: no need to run nvcc (slow to start).
            entry["nvcc_version"] = recorded_nvcc
            entry["nvcc_release"] = cuda_xy(recorded_nvcc)
        else:
            entry["nvcc_release"], entry["nvcc_version"] = nvcc_version(nvcc)
        if not entry["version"]:
            entry["version"] = entry["nvcc_version"]
    entry["components"] = toolkit_components(root)
    return entry


def is_toolkit_root(root):
    """A CUDA toolkit tree, not e.g. /usr/local holding an nvcc wrapper script."""
    headers = [os.path.join(root, "include", "cuda_runtime.h")]
    headers += glob.glob(os.path.join(root, "targets", "*", "include", "cuda_runtime.h"))
    return any(os.path.exists(h) for h in headers)


def toolkits(work_root):
    candidates = []
    for d in sorted(glob.glob("/usr/local/cuda-*")):
        candidates.append((d, "system"))
    if os.path.isdir("/usr/local/cuda"):
        candidates.append(("/usr/local/cuda", "system"))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append((os.environ[var], var))
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append((os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "PATH"))
    for d in sorted(glob.glob(os.path.join(work_root, "toolkits", "*"))):
        if not os.path.basename(d).startswith("."):
            candidates.append((d, "work_root"))
    seen, out = {}, []
    for path, source in candidates:
        if not os.path.isdir(path):
            continue
        real = os.path.realpath(path)
        if real in seen:
            seen[real]["aliases"].append(path)
            continue
        if not is_toolkit_root(real):
            continue
        entry = toolkit(path, source)
        entry["aliases"] = [path]
        if entry["nvcc"] or entry["version"]:
            seen[real] = entry
            out.append(entry)
    return out


def main():
    args = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    work_root = os.path.abspath(os.path.expanduser(args.get("work_root") or DEFAULT_WORK_ROOT))
    facts = {
        "hostname": socket.gethostname(),
        "user": pwd.getpwuid(os.getuid()).pw_name,
        "work_root": work_root,
        "os": os_release(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpu": cpu(),
        "memory": meminfo(),
        "disk": disk(work_root),
        "glibc": glibc(),
        "gcc": compilers(),
        "python": pythons(),
        "probe_python": {"path": sys.executable, "version": "%d.%d.%d" % sys.version_info[:3]},
        "gpu": gpus(),
        "cuda": toolkits(work_root),
    }
    print(json.dumps(facts, sort_keys=True))


if __name__ == "__main__":
    main()
