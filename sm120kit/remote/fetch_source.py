"""Put a pinned package source tree on a host (stdlib only; runs remotely, JSON in and out).

Arguments (``kind`` decides which of the others matter)::

    {"kind": "sdist" | "url" | "git" | "path", "dest": dir, "cache_dir": dir,
     # sdist: "package", "version", "sha256", "index_url" (PEP 503/691 simple index,
     #        default PyPI; a mirror's URL works), or "url" to skip the index look-up
     # url:   "url" (or "urls": [mirror, ..., origin], tried in order), "sha256"
     # git:   "repo" (URL or local path), "commit", "subdir"
     # path:  "tarball" (already on the host), "tree_sha256" (expected, optional)
     "subdir": "sgl-kernel"}

Archives are downloaded into ``cache_dir`` and their sha256 is checked before anything is
unpacked: a mismatch is an error naming the expected and actual hash, and leaves nothing
behind. Trees are unpacked into a temporary directory beside `dest` and renamed into place.
`dest` gets a ``.sm120kit-source.json`` marker; a later run whose request matches the marker
does no work (``"changed": false``).

Prints ``{"ok": bool, "changed": bool, "dest": dir, "identity": {...}, "tree_sha256": ...}`` or
``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile

MARKER = ".sm120kit-source.json"
DEFAULT_INDEX = "https://pypi.org/simple"


class FetchError(Exception):
    """A source could not be fetched; the message is one line naming what failed."""


# -- hashing ------------------------------------------------------------------------------


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_hash(root):
    """sha256 over a tree's relative paths, executable bits, link targets and file contents.

    The marker file and VCS metadata are left out, so the controller can compute the same
    value for a local tree before uploading it (``from sm120kit.remote.fetch_source import
    tree_hash``).
    """
    digest = hashlib.sha256()
    root = os.path.abspath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", ".hg", ".svn"))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel == MARKER:
                continue
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                digest.update((f"L {rel} -> {os.readlink(full)}\n").encode())
                continue
            kind = "X" if info.st_mode & 0o111 else "F"
            digest.update(f"{kind} {rel} {info.st_size}\n".encode())
            with open(full, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


# -- downloads ----------------------------------------------------------------------------


def _normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def sdist_links(index_url, package, version):
    """[(filename, url, sha256 or None)] of `package`'s sdists for `version` on a simple index
    (PEP 691 JSON or PEP 503 HTML). The controller uses this too, to pin a hash before a run."""
    page = index_url.rstrip("/") + "/" + _normalize(package) + "/"
    request = urllib.request.Request(
        page, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            body = resp.read().decode("utf-8", "replace")
            ctype = resp.headers.get("Content-Type", "")
    except (OSError, ValueError) as exc:
        raise FetchError("cannot read the index page %s: %s" % (page, exc)) from None
    links = []  # (filename, url, sha256 or None)
    if "json" in ctype:
        for entry in json.loads(body).get("files", []):
            links.append(
                (
                    entry["filename"],
                    urllib.parse.urljoin(page, entry["url"]),
                    (entry.get("hashes") or {}).get("sha256"),
                )
            )
    else:
        for href in re.findall(r'href="([^"]+)"', body):
            url = urllib.parse.urljoin(page, href.replace("&amp;", "&"))
            base, _, fragment = url.partition("#")
            name = urllib.parse.unquote(base.rsplit("/", 1)[-1])
            digest = fragment[len("sha256=") :] if fragment.startswith("sha256=") else None
            links.append((name, base, digest))
    sdists = []
    for ext in (".tar.gz", ".zip"):
        for link in links:
            if link[0].endswith(ext):
                name, _, found = link[0][: -len(ext)].rpartition("-")
                if _normalize(name) == _normalize(package) and found == version:
                    sdists.append(link)
    if not sdists:
        raise FetchError("no sdist of %s %s on %s" % (package, version, page))
    return sdists


def resolve_sdist(index_url, package, version, sha256):
    """The URL of `package`'s sdist for `version` on a simple index.

    The file whose listed sha256 equals the expected one wins; otherwise the one named like
    an sdist of that version (its hash is checked after the download anyway).
    """
    sdists = sdist_links(index_url, package, version)
    for link in sdists:
        if link[2] and link[2] == sha256:
            return link[1]
    return sdists[0][1]


def download(urls, sha256, cache_dir):
    """A verified local copy of the file with `sha256`, from the cache or the first URL that
    serves it. Nothing is kept of a download whose hash does not match."""
    if not re.match(r"^[0-9a-f]{64}$", sha256 or ""):
        raise FetchError(f"a sha256 (64 hex digits) is required to download {urls[0]}")
    slot = os.path.join(cache_dir, "archives", sha256)
    name = os.path.basename(urllib.parse.urlparse(urls[0]).path) or "source"
    final = os.path.join(slot, name)
    if os.path.isfile(final) and sha256_file(final) == sha256:
        return final, False
    if not os.path.isdir(slot):
        os.makedirs(slot)
    errors = []
    for url in urls:
        fd, part = tempfile.mkstemp(dir=slot, prefix=".part-")
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out:
                with urllib.request.urlopen(url, timeout=120) as resp:
                    for block in iter(lambda: resp.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
            actual = digest.hexdigest()
            if actual != sha256:
                raise FetchError(f"sha256 mismatch for {url}: expected {sha256}, got {actual}")
            os.replace(part, final)
            return final, True
        except FetchError:
            _unlink(part)
            _rmdir_if_empty(slot)
            raise  # a wrong file is not a reason to try the next mirror silently
        except (OSError, ValueError) as exc:
            _unlink(part)
            errors.append(f"{url}: {exc}")
    _rmdir_if_empty(slot)
    raise FetchError("download failed: " + "; ".join(errors))


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def _rmdir_if_empty(path):
    try:
        os.rmdir(path)
    except OSError:
        pass


# -- unpacking ----------------------------------------------------------------------------


def _safe_name(name):
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if name.startswith("/") or ".." in parts:
        raise FetchError(f"archive member '{name}' points outside the tree")
    return "/".join(parts)


def unpack(archive, target):
    """Unpack a tar or zip archive into `target`, refusing members that escape it."""
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                member.name = _safe_name(member.name)
                if not member.name:
                    continue
                if member.issym() or member.islnk():
                    link = member.linkname if member.issym() else _safe_name(member.linkname)
                    base = os.path.dirname(member.name) if member.issym() else ""
                    if link.startswith("/") or ".." in os.path.normpath(
                        os.path.join(base, link)
                    ).split(os.sep):
                        raise FetchError(f"archive link '{member.name}' points outside the tree")
                elif not (member.isfile() or member.isdir()):
                    continue  # devices, fifos: never part of a source tree
                member.mode = (member.mode or 0o644) & 0o755 | 0o600
                members.append(member)
            if hasattr(tarfile, "data_filter"):
                # Checked above already; the filter also keeps 3.12+ from warning.
                tar.extractall(target, members=members, filter="data")
            else:
                tar.extractall(target, members=members)
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _safe_name(info.filename)
            zf.extractall(target)
    else:
        raise FetchError(f"{archive} is neither a tar nor a zip archive")


def _single_top(directory):
    """An sdist unpacks to one `name-version/` directory: that is the tree."""
    entries = os.listdir(directory)
    if len(entries) == 1 and os.path.isdir(os.path.join(directory, entries[0])):
        return os.path.join(directory, entries[0])
    return directory


def _subdir(root, subdir, what):
    if not subdir:
        return root
    path = os.path.join(root, _safe_name(subdir))
    if not os.path.isdir(path):
        raise FetchError(f"{what} has no directory '{subdir}'")
    return path


# -- git ----------------------------------------------------------------------------------


def _git(args, cwd=None):
    try:
        proc = subprocess.run(
            ["git"] + args,
            cwd=cwd,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        raise FetchError(f"git is needed for git sources: {exc}") from None
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise FetchError(
            "git {} failed: {}".format(" ".join(args[:3]), lines[-1] if lines else proc.returncode)
        )
    return proc.stdout.decode("utf-8", "replace").strip()


def git_export(repo, commit, subdir, cache_dir, target):
    """Export `commit` (path `subdir` of it) of `repo` into `target`; returns the full sha.

    A bare repository per origin in the cache keeps later fetches incremental.
    """
    key = hashlib.sha256(repo.encode()).hexdigest()[:16]
    bare = os.path.join(cache_dir, "git", key)
    if not os.path.isdir(os.path.join(bare, "objects")):
        os.makedirs(bare)
        _git(["init", "--bare", "-q", bare])
    have = (
        subprocess.run(
            ["git", "-C", bare, "cat-file", "-e", commit + "^{commit}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ).returncode
        == 0
    )
    if not have:
        try:
            _git(["-C", bare, "fetch", "-q", repo, commit])
        except FetchError:
            # Servers that refuse a fetch by sha: take every branch and tag instead.
            _git(
                [
                    "-C",
                    bare,
                    "fetch",
                    "-q",
                    repo,
                    "+refs/heads/*:refs/heads/*",
                    "+refs/tags/*:refs/tags/*",
                ]
            )
    full = _git(["-C", bare, "rev-parse", "--verify", "-q", commit + "^{commit}"])
    treeish = full + (":" + _safe_name(subdir) if subdir else "")
    fd, tarball = tempfile.mkstemp(dir=cache_dir, prefix=".export-", suffix=".tar")
    os.close(fd)
    try:
        try:
            _git(["-C", bare, "archive", "--format=tar", "-o", tarball, treeish])
        except FetchError:
            raise FetchError(f"commit {full} of {repo} has no directory '{subdir}'") from None
        unpack(tarball, target)
    finally:
        _unlink(tarball)
    return full


# -- the step -----------------------------------------------------------------------------


def identity(args):
    """What makes two requests the same source (a mirror URL does not)."""
    kind = args["kind"]
    if kind in ("sdist", "url"):
        return {"kind": "archive", "sha256": args["sha256"], "subdir": args.get("subdir") or ""}
    if kind == "git":
        return {"kind": "git", "commit": args["commit"], "subdir": args.get("subdir") or ""}
    if kind == "path":
        return {
            "kind": "path",
            "tree_sha256": args.get("tree_sha256")
            or sha256_file(os.path.expanduser(args["tarball"])),
            "subdir": args.get("subdir") or "",
        }
    raise FetchError(f"kind must be sdist, url, git or path, not {kind!r}")


def read_marker(dest):
    try:
        with open(os.path.join(dest, MARKER)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _matches(marker, ident):
    if not marker:
        return False
    have = marker.get("identity") or {}
    if ident["kind"] == "git":
        # A pinned short sha or tag was resolved to the full sha the first time.
        return (
            have.get("kind") == "git"
            and have.get("subdir") == ident["subdir"]
            and (
                have.get("commit") == ident["commit"]
                or have.get("resolved", "").startswith(ident["commit"])
            )
        )
    # The record may hold more (the URL it came from); only the identity keys decide.
    return all(have.get(k) == v for k, v in ident.items())


def fetch(args):
    dest = os.path.abspath(os.path.expanduser(args["dest"]))
    cache_dir = os.path.abspath(
        os.path.expanduser(args.get("cache_dir") or os.path.join(os.path.dirname(dest), ".cache"))
    )
    ident = identity(args)
    marker = read_marker(dest)
    if _matches(marker, ident):
        return {
            "ok": True,
            "changed": False,
            "dest": dest,
            "identity": marker["identity"],
            "tree_sha256": marker.get("tree_sha256"),
        }
    for directory in (cache_dir, os.path.dirname(dest)):
        if not os.path.isdir(directory):
            os.makedirs(directory)
    work = tempfile.mkdtemp(dir=os.path.dirname(dest), prefix=".fetch-")
    try:
        unpacked = os.path.join(work, "tree")
        os.mkdir(unpacked)
        kind = args["kind"]
        record = dict(ident)
        if kind in ("sdist", "url"):
            urls = list(args.get("urls") or ([args["url"]] if args.get("url") else []))
            if not urls and kind == "sdist":
                urls = [
                    resolve_sdist(
                        args.get("index_url") or DEFAULT_INDEX,
                        args["package"],
                        args["version"],
                        args["sha256"],
                    )
                ]
            if not urls:
                raise FetchError(f"kind {kind} needs 'url' or 'urls'")
            archive, _ = download(urls, args["sha256"], cache_dir)
            unpack(archive, unpacked)
            root = _subdir(_single_top(unpacked), args.get("subdir"), archive)
            record["url"] = urls[0]
        elif kind == "git":
            record["resolved"] = git_export(
                args["repo"], args["commit"], args.get("subdir"), cache_dir, unpacked
            )
            record["repo"] = args["repo"]
            root = unpacked
        else:
            tarball = os.path.expanduser(args["tarball"])
            unpack(tarball, unpacked)
            root = _subdir(unpacked, args.get("subdir"), tarball)
        digest = tree_hash(root)
        if kind == "path" and args.get("tree_sha256") and digest != args["tree_sha256"]:
            raise FetchError(
                f"tree hash mismatch for {args['tarball']}: expected {args['tree_sha256']}, "
                f"got {digest}"
            )
        with open(os.path.join(root, MARKER), "w") as fh:
            json.dump({"identity": record, "tree_sha256": digest}, fh, sort_keys=True)
        _replace_dir(root, dest, work)
        return {
            "ok": True,
            "changed": True,
            "dest": dest,
            "identity": record,
            "tree_sha256": digest,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _replace_dir(new, dest, work):
    """Move `new` to `dest`; an old `dest` is moved aside first and removed after."""
    if os.path.lexists(dest):
        os.rename(dest, os.path.join(work, "old"))
    os.rename(new, dest)


def main(argv):
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    try:
        result = fetch(args)
    except FetchError as exc:
        result = {"ok": False, "error": str(exc)}
    except (KeyError, ValueError, OSError) as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
