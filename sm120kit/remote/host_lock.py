"""Per-host run lock under work_root, so two runs never change one host at once.

Arguments (argv[1], JSON): {"work_root": ..., "action": "acquire"|"release", "owner": {...},
"token": "...", "stale_after": seconds}. The lock is a directory created with mkdir (atomic
on every POSIX filesystem) holding owner.json; a lock older than stale_after is taken over.
Prints {"acquired": bool, "holder": {...} | null, "stale_taken_over": bool}.
"""

import json
import os
import shutil
import sys
import time


def main():
    args = json.loads(sys.argv[1])
    work_root = os.path.abspath(os.path.expanduser(args["work_root"]))
    lock_dir = os.path.join(work_root, "locks", "run.lock")
    owner_file = os.path.join(lock_dir, "owner.json")
    if args["action"] == "release":
        try:
            with open(owner_file) as fh:
                holder = json.load(fh)
        except (OSError, ValueError):
            holder = None
        if holder is None or holder.get("token") == args["token"]:
            shutil.rmtree(lock_dir, ignore_errors=True)
            print(json.dumps({"released": True}))
        else:
            print(json.dumps({"released": False, "holder": holder}))
        return
    os.makedirs(os.path.dirname(lock_dir), exist_ok=True)
    stale_taken_over = False
    for _ in range(2):
        try:
            os.mkdir(lock_dir)
        except FileExistsError:
            try:
                with open(owner_file) as fh:
                    holder = json.load(fh)
            except (OSError, ValueError):
                holder = {"since": os.stat(lock_dir).st_mtime, "unknown": True}
            age = time.time() - float(holder.get("since", 0))
            stale_after = args.get("stale_after")
            if stale_after is not None and age > float(stale_after):
                shutil.rmtree(lock_dir, ignore_errors=True)
                stale_taken_over = True
                continue
            holder["age_seconds"] = int(age)
            holder.pop("token", None)
            print(json.dumps({"acquired": False, "holder": holder}))
            return
        owner = dict(args.get("owner") or {})
        owner["token"] = args["token"]
        owner["since"] = time.time()
        tmp = owner_file + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(owner, fh)
        os.rename(tmp, owner_file)
        print(json.dumps({"acquired": True, "holder": None, "stale_taken_over": stale_taken_over}))
        return
    print(json.dumps({"acquired": False, "holder": {"unknown": True}}))


if __name__ == "__main__":
    main()
