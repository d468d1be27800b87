# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
#
# A fork server: the in-target scripts (load.py, loader_eval.py, import_top.py), each run in a
# child forked from this interpreter instead of a fresh one. With ARGS["with_torch"] this
# interpreter imports torch once first (the torch_info script, so its answer is the one a
# fresh run gives): a child then starts where `python -c "import torch; ..."` would be after
# its first line, at the cost of one fork. Without it, this interpreter has imported nothing
# but the prelude's json, os and sys and the few modules below, so a child is a fresh
# interpreter for an import-order check ("alone"). Each child runs one script and exits: what
# it loads (RTLD_GLOBAL libraries, a faked torch.cuda) never reaches another check. This
# interpreter never initializes CUDA (torch_info runs with gpu=false here), so a child may.
#
# Protocol: one marked line {"ready": true, "torch_info": {...}} once torch is imported; then
# per line on stdin {"id", "script", "args", "timeout"} a marked line {"id", "result"} (the
# script's own answer) or {"id", "error", "signal", "exit"} (no answer: the child's last
# output, as a fresh interpreter's stderr would be read). EOF on stdin: finish and exit.
import select, signal, time

_SCRIPTS = ARGS["scripts"]
_WORK = ARGS["work"]
ready = {"ready": True, "torch_info": None}
if ARGS.get("with_torch"):
    _g = dict(globals())
    _got = []
    _g["ARGS"], _g["_emit"] = {"gpu": False}, _got.append
    exec(compile(_SCRIPTS["torch_info"], "<torch_info>", "exec"), _g)
    ready["torch_info"] = _got[0] if _got else {"error": "torch_info gave no answer"}
sys.stdout.flush()
sys.stderr.flush()
_emit(ready)

_children = {}  # pid -> (id, deadline, timeout, out path, err path)


def _child(job, out_path, err_path):
    fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(0)

    def emit(obj):
        with open(out_path + ".part", "w") as fh:
            json.dump(obj, fh)
        os.rename(out_path + ".part", out_path)

    g = dict(globals())
    g["ARGS"], g["_emit"] = job["args"], emit
    code = 0
    try:
        exec(compile(_SCRIPTS[job["script"]], "<%s>" % job["script"], "exec"), g)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def _start(job):
    out_path = os.path.join(_WORK, "%s-%d.json" % (os.getpid(), job["id"]))
    err_path = out_path[:-5] + ".err"
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _child(job, out_path, err_path)
    timeout = float(job.get("timeout") or 300)
    _children[pid] = (job["id"], time.monotonic() + timeout, timeout, out_path, err_path)


def _answer(jid, status, out_path, err_path, timeout):
    doc = {"id": jid}
    try:
        with open(out_path) as fh:
            doc["result"] = json.load(fh)
    except (OSError, ValueError):
        doc["result"] = None
    if doc["result"] is None:
        if status is None:
            doc["error"] = "timed out after %.0fs" % timeout
        elif os.WIFSIGNALED(status):
            doc["signal"] = os.WTERMSIG(status)
        else:
            doc["exit"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        try:
            with open(err_path, errors="replace") as fh:
                doc["stderr"] = fh.read()[-8000:]
        except OSError:
            doc["stderr"] = ""
    for p in (out_path, err_path):
        try:
            os.unlink(p)
        except OSError:
            pass
    _emit(doc)


def _reap():
    now = time.monotonic()
    for pid in list(_children):
        jid, deadline, timeout, out_path, err_path = _children[pid]
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            if now < deadline:
                continue
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
        del _children[pid]
        _answer(jid, status, out_path, err_path, timeout)


_buf = b""
_open = True
while _open or _children:
    if _open:
        readable, _w, _x = select.select([0], [], [], 0.02 if _children else None)
        if readable:
            data = os.read(0, 1 << 16)
            if not data:
                _open = False
            _buf += data
            while b"\n" in _buf:
                line, _buf = _buf.split(b"\n", 1)
                if line.strip():
                    _start(json.loads(line.decode()))
    else:
        time.sleep(0.02)
    _reap()
