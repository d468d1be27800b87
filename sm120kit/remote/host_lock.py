"""Per-host run lock under work_root, so two runs never change one host at once.

Arguments (argv[1], JSON): {"work_root": ..., "action": "acquire"|"refresh"|"release",
"owner": {...}, "token": "...", "stale_after": seconds, "dead_holder_since": time}.
The lock is a directory created with mkdir (atomic on every POSIX filesystem) holding
owner.json (the controller host, boot id, pid, task, token, since, refreshed). The holder
refreshes it while it works (a heartbeat); a lock not refreshed for stale_after seconds is
taken over, and so is one whose `since` equals dead_holder_since (the controller found that
holder's process dead on its own machine). Each command of the holder's run left a file
pg.<process group id> in the lock directory; on a takeover the groups still running (and
started before their file was written, so not a reused id) are killed: the dead run's work
must not go on beside the new run's.
Once acquired, the temporaries earlier runs left are swept (`sweep_leftovers`): the stack's
``.<env>.fetched``/``.<env>.progress`` files and the controller's uploads
``<dest>.<token>.part`` (only the lock's holder writes them, and that is now this run), and the
host's downloads ``<dest>.<pid>-<thread>[.peer].part`` whose writer is gone (a live one's never:
a download left running by a run that gave up on it keeps its file).
Prints {"acquired": bool, "holder": {...} | null, "stale_taken_over": bool,
"dead_taken_over": bool, "killed": [pgid, ...], "swept": [path, ...]} (refresh and release print {"refreshed"/"released": bool}).
"""

import glob
import json
import os
import re
import shutil
import sys
import time


def read_owner(owner_file):
    try:
        with open(owner_file) as fh:
            holder = json.load(fh)
        return holder if isinstance(holder, dict) else None
    except (OSError, ValueError):
        return None


def write_owner(owner_file, owner):
    tmp = owner_file + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(owner, fh)
    os.rename(tmp, owner_file)


def _started_at(pid):
    """Epoch seconds at which process `pid` started, or None when it is gone or a zombie."""
    try:
        with open("/proc/{}/stat".format(pid)) as fh:
            fields = fh.read().rpartition(")")[2].split()
        with open("/proc/stat") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return None
    if fields[0] == "Z":
        return None
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def kill_leftovers(lock_dir):
    """Kill the process groups a dead holder's commands left behind; their ids."""
    import signal

    killed = []
    try:
        names = os.listdir(lock_dir)
    except OSError:
        return killed
    for name in names:
        if not name.startswith("pg."):
            continue
        try:
            pgid = int(name[3:])
            marked = os.stat(os.path.join(lock_dir, name)).st_mtime
        except (ValueError, OSError):
            continue
        started = _started_at(pgid)
        if pgid <= 1 or pgid == os.getpgrp() or started is None or started > marked + 2:
            continue
        try:
            os.killpg(pgid, signal.SIGTERM)
        except OSError:
            continue
        killed.append(pgid)
        for _ in range(40):
            if _started_at(pgid) is None:
                break
            time.sleep(0.05)
        else:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
    return killed


_WRITER = re.compile(r"\.(\d+)-\d+(?:\.peer)?\.part$")
_UPLOAD = re.compile(r"\.[0-9a-f]{12}\.part$")


def _writer_alive(pid, path):
    """Whether process `pid` (started no later than `path` was last written) still runs."""
    started = _started_at(pid)
    try:
        return started is not None and started <= os.stat(path).st_mtime + 2
    except OSError:
        return False


def sweep_leftovers(work_root):
    """Remove what interrupted or failed runs left under `work_root`; the paths removed."""
    swept = []
    found = glob.glob(os.path.join(work_root, "releases", "*", "*.part"))
    # uv's binary unpacked from its wheel (lib/uv_sync.unpack): a writer's own temporary too.
    found += glob.glob(os.path.join(work_root, "tools", "*", "*.part"))
    for pattern in (".*.fetched", ".*.progress", ".*.progress.tmp"):
        found += glob.glob(os.path.join(work_root, "envs", pattern))
    for path in sorted(found):
        writer = _WRITER.search(path)
        if writer is not None and _writer_alive(int(writer.group(1)), path):
            continue
        if path.endswith(".part") and writer is None and not _UPLOAD.search(path):
            continue  # not a name this tool gives: not its to remove
        try:
            os.unlink(path)
        except OSError:
            continue
        swept.append(path)
    return swept


def main():
    args = json.loads(sys.argv[1])
    work_root = os.path.abspath(os.path.expanduser(args["work_root"]))
    lock_dir = os.path.join(work_root, "locks", "run.lock")
    owner_file = os.path.join(lock_dir, "owner.json")
    action = args["action"]
    if action == "release":
        holder = read_owner(owner_file)
        if holder is None or holder.get("token") == args["token"]:
            shutil.rmtree(lock_dir, ignore_errors=True)
            print(json.dumps({"released": True}))
        else:
            print(json.dumps({"released": False, "holder": holder}))
        return
    if action == "refresh":
        holder = read_owner(owner_file)
        ok = holder is not None and holder.get("token") == args["token"]
        if ok:
            holder["refreshed"] = time.time()
            write_owner(owner_file, holder)
        print(json.dumps({"refreshed": ok}))
        return
    os.makedirs(os.path.dirname(lock_dir), exist_ok=True)
    stale_taken_over = dead_taken_over = False
    killed = []
    for _ in range(2):
        try:
            os.mkdir(lock_dir)
        except FileExistsError:
            holder = read_owner(owner_file)
            if holder is None:
                holder = {"since": os.stat(lock_dir).st_mtime, "unknown": True}
            last = float(holder.get("refreshed") or holder.get("since") or 0)
            age = time.time() - last
            stale_after = args.get("stale_after")
            dead_since = args.get("dead_holder_since")
            if dead_since is not None and holder.get("since") == dead_since:
                killed += kill_leftovers(lock_dir)
                shutil.rmtree(lock_dir, ignore_errors=True)
                dead_taken_over = True
                continue
            if stale_after is not None and age > float(stale_after):
                killed += kill_leftovers(lock_dir)
                shutil.rmtree(lock_dir, ignore_errors=True)
                stale_taken_over = True
                continue
            holder["age_seconds"] = int(time.time() - float(holder.get("since") or 0))
            holder["idle_seconds"] = int(age)
            holder.pop("token", None)
            print(json.dumps({"acquired": False, "holder": holder}))
            return
        owner = dict(args.get("owner") or {})
        owner["token"] = args["token"]
        owner["since"] = owner["refreshed"] = time.time()
        write_owner(owner_file, owner)
        swept = sweep_leftovers(work_root)
        print(
            json.dumps(
                {
                    "acquired": True,
                    "holder": None,
                    "stale_taken_over": stale_taken_over,
                    "dead_taken_over": dead_taken_over,
                    "killed": killed,
                    "swept": swept,
                }
            )
        )
        return
    print(json.dumps({"acquired": False, "holder": {"unknown": True}}))


if __name__ == "__main__":
    main()
