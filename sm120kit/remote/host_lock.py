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
Once the lock is held, the temporaries earlier runs left in the work root are swept
(`sweep_leftovers`): every writer names its temporary ``<dest>.<pid>-<token>.<kind>``
(kind ``part``, ``peer.part``, ``fetched`` or ``progress``), the host process's pid, or 0 for
a file the controller writes (its run holds this lock, so at acquire none is live); one whose
pid is gone (or now another process's, started after the file was last written) is removed,
a live writer's never.
Prints {"acquired": bool, "holder": {...} | null, "stale_taken_over": bool,
"dead_taken_over": bool, "killed": [pgid, ...], "swept": [path, ...]} (refresh and release print {"refreshed"/"released": bool}).
"""

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


#: A writer's temporary: ``<dest>.<pid>-<token>.part`` (``.peer.part``, ``.fetched``,
#: ``.progress``); pid 0: the controller's.
TEMPORARY = re.compile(r"\.(\d+)-[0-9A-Za-z]+\.(?:part|peer\.part|fetched|progress)$")

#: Where the data path writes them, relative to the work root, and how deep: releases/<sha>/,
#: envs/ (never inside an env), tools/uv-<version>/.
SWEPT = (("releases", 1), ("envs", 0), ("tools", 1))


def _live_writer(pid, written):
    started = _started_at(pid) if pid > 0 else None
    return started is not None and started <= written + 2


def sweep_leftovers(work_root):
    """Remove the temporaries of writers that are gone; their paths."""
    removed = []
    for top, depth in SWEPT:
        folders = [os.path.join(work_root, top)]
        for _ in range(depth):
            nxt = []
            for folder in folders:
                try:
                    nxt += [e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
                except OSError:
                    pass
            folders += nxt
        for folder in folders:
            try:
                entries = [e for e in os.scandir(folder) if e.is_file(follow_symlinks=False)]
            except OSError:
                continue
            for entry in entries:
                m = TEMPORARY.search(entry.name)
                if m is None:
                    continue
                try:
                    if _live_writer(int(m.group(1)), entry.stat(follow_symlinks=False).st_mtime):
                        continue
                    os.unlink(entry.path)
                except OSError:
                    continue
                removed.append(entry.path)
    return removed


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
