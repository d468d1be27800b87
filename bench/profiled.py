"""Run a Python module under cProfile in every thread, and write the merged profile.

    python3 bench/profiled.py OUT.pstats -m invoke --search-root . provision -H h00

`python -m cProfile` profiles the main thread only; the controller's work per host runs in
threads (one per host, its services' readers, paramiko's transports), so each thread gets
a profiler of its own (`threading.setprofile`) and all are merged at exit (pstats). The
timer is the thread's CPU time (`time.thread_time`), not the wall clock: a thread blocked
on a lock or a socket costs nothing, as in the CPU-s the bench reports. Used by
bench/fleet.py ``--profile`` to say where the controller's CPU per host goes.
"""

from __future__ import annotations

import atexit
import cProfile
import pstats
import runpy
import sys
import threading
import time

_PROFILES: list[cProfile.Profile] = []


def _start(*_: object) -> None:
    # The first event of a new thread: its own profiler from here on (cProfile's enable
    # replaces this hook for the thread).
    prof = cProfile.Profile(time.thread_time)
    _PROFILES.append(prof)
    prof.enable()


def _dump(out: str) -> None:
    for prof in _PROFILES:
        prof.disable()
    stats = pstats.Stats(_PROFILES[0])
    for prof in _PROFILES[1:]:
        try:
            stats.add(prof)
        except TypeError:
            pass  # a thread that never ran a profiled call
    stats.dump_stats(out)


def main() -> None:
    usage = "usage: profiled.py OUT.pstats -m MODULE [ARGS...]"
    if sys.argv[1:2] in (["-h"], ["--help"]):
        print(usage + "\n\n" + (__doc__ or "").strip())
        return
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        raise SystemExit(usage)
    out, module = sys.argv[1], sys.argv[3]
    sys.argv = [module, *sys.argv[4:]]
    sys.path[0] = ""  # as `python -m` has it: the working directory, not bench/
    threading.setprofile(_start)
    main_prof = cProfile.Profile(time.thread_time)
    _PROFILES.append(main_prof)
    atexit.register(_dump, out)
    main_prof.enable()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
