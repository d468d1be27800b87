"""Files on the host: remove anything, hash a file, write one atomically, read the text of a
library module that is a program (not imported)."""

import base64
import hashlib
import importlib.util
import os
import shutil
import threading

CHUNK = 1 << 20


def remove(path):
    """Remove a file, link or directory tree; nothing when absent."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)


def sha256_file(path, chunk=CHUNK):
    """The sha256 hex digest of the file at `path`, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def record_digest(path):
    """The RECORD form of a file's sha256 (``sha256=`` urlsafe base64, no padding), or None
    when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(CHUNK), b""):
                h.update(block)
    except OSError:
        return None
    return "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def write_atomic(path, text):
    """Write `text` beside `path`, then rename it over `path`: readers see all or nothing.

    The temporary is this writer's own (pid and thread in its name): two writers of one path
    never write into each other's file, and a failed write leaves none behind."""
    tmp = "%s.%d-%d.tmp" % (path, os.getpid(), threading.get_ident())
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def size_of(root):
    """Bytes of the regular files under `root` (links not followed)."""
    total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total


def module_text(module):
    """The source text of module `module` of the hosts' library, found but never executed:
    from the package's files on the controller, from the bundle on a host (a module the
    script's ``__bundle__`` lists)."""
    spec = importlib.util.find_spec(module)
    source = spec.loader.get_source(module) if spec and spec.loader else None
    if source is None:
        raise ImportError("no source for %s" % module)
    return str(source)
