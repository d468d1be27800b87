# Runs inside the serving env's interpreter (python -c), after prelude.py and the engine's
# resolver (server_args.py, vllm_args.py: targets.RESOLVE_SERVERS; with _SERVE set, so that
# file only defines _setup, _run_cases): a warm resolution server.
#
# The engine's import is most of a preflight (torch, sglang and its resolution pipeline: ~10 s
# of CPU on a 2-core host; vLLM's engine args and configs more). This interpreter imports them
# once (_setup, with the GPU faked as
# ARGS["cc"] / ARGS["memory_mib"] when there is none), then listens on the unix socket
# ARGS["socket"] (in a 0700 directory of this user's): per connection one JSON line, the
# resolver's request ({"cases", ...}); a child forked from this interpreter runs
# it (_run_cases) and writes back one JSON line, the answer a fresh interpreter gives. What a
# child does (a published context, a GPU wall, the modules it imports) dies with it. No hang:
# a child is killed by SIGALRM after ARGS["timeout"] s; the server exits after ARGS["idle"] s
# without a request, removing its socket and ARGS["stub_dir"] (its libcuda stub), and after
# its first answer when the import failed (nothing warm to keep), and when a request says
# {"stop": true} (it answers {"stopped": true, "pid"} first).
import shutil, signal, socket

_SOCK = ARGS["socket"]
_state = _setup(ARGS)
_state["driver"] = ARGS.get("driver")


def _serve_one(conn):
    conn.settimeout(30)
    raw = b""
    while b"\n" not in raw:
        got = conn.recv(1 << 16)
        if not got:
            return
        raw += got
    request = json.loads(raw.split(b"\n", 1)[0].decode())
    if request.get("stop"):
        # `preflight --stop-warm` (lib/warm.py stop_all): answer, then leave the loop.
        conn.sendall((json.dumps({"stopped": True, "pid": os.getpid()}) + "\n").encode())
        return "stop"
    pid = os.fork()
    if pid == 0:
        signal.alarm(int(request.get("timeout") or ARGS.get("timeout") or 300))
        code = 0
        try:
            out = dict(_state, cases=[])
            if out["ran"]:
                _run_cases(out, request)
            data = (json.dumps(out) + "\n").encode()
            conn.settimeout(60)
            conn.sendall(data)
        except BaseException:
            code = 1
        os._exit(code)
    conn.close()
    os.waitpid(pid, 0)


def _main():
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    part = _SOCK + ".%d" % os.getpid()
    ino = None
    try:
        listener.bind(part)
        # rename: a client never connects to a server still binding; a second server started
        # by a concurrent preflight takes the name over, and this one idles out unused.
        os.rename(part, _SOCK)
        ino = os.stat(_SOCK).st_ino
        listener.listen(8)
        listener.settimeout(float(ARGS.get("idle") or 600))
        while True:
            try:
                conn, _addr = listener.accept()
            except socket.timeout:
                break
            said = None
            try:
                said = _serve_one(conn)
            except (OSError, ValueError):
                pass
            finally:
                conn.close()
            if not _state["ran"] or said == "stop":
                break
    finally:
        listener.close()
        try:
            if os.path.exists(part):
                os.unlink(part)
            if ino is not None and os.stat(_SOCK).st_ino == ino:
                os.unlink(_SOCK)  # still this server's name (not a newer server's)
        except OSError:
            pass
        if ARGS.get("stub_dir"):
            shutil.rmtree(ARGS["stub_dir"], ignore_errors=True)


_main()
