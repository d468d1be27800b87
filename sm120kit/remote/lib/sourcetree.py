"""Source trees on a host and on the controller: the marker, the tree digest, archives, git.

Both sides use this module: remote/fetch_source.py on hosts (bundled with it), and the
controller (`sm120kit.builds.sources`, `sm120kit.ops.build_source`) to compute the same tree digest for a
local tree, read the same marker and look up the same sdist before a run. Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile

from sm120kit.remote.lib.files import sha256_file
from sm120kit.remote.lib.names import dist_name

MARKER = ".sm120kit-source.json"
DEFAULT_INDEX = "https://pypi.org/simple"


class FetchError(Exception):
    """A source could not be fetched; the message is one line naming what failed."""


# -- hashing ------------------------------------------------------------------------------


def tree_hash(root):
    """sha256 over a tree's relative paths, executable bits, link targets and file contents.

    The marker file and VCS metadata are left out, so the controller can compute the same
    value for a local tree before uploading it.
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


# -- the index ----------------------------------------------------------------------------


def sdist_links(index_url, package, version):
    """[(filename, url, sha256 or None)] of `package`'s sdists for `version` on a simple index
    (PEP 691 JSON or PEP 503 HTML). The controller uses this too, to pin a hash before a run."""
    page = index_url.rstrip("/") + "/" + dist_name(package) + "/"
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
                if dist_name(name) == dist_name(package) and found == version:
                    sdists.append(link)
    if not sdists:
        raise FetchError("no sdist of %s %s on %s" % (package, version, page))
    return sdists


def unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


# -- unpacking ----------------------------------------------------------------------------


def safe_name(name):
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
                member.name = safe_name(member.name)
                if not member.name:
                    continue
                if member.issym() or member.islnk():
                    link = member.linkname if member.issym() else safe_name(member.linkname)
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
                safe_name(info.filename)
            zf.extractall(target)
    else:
        raise FetchError(f"{archive} is neither a tar nor a zip archive")


def single_top(directory):
    """An sdist unpacks to one `name-version/` directory: that is the tree."""
    entries = os.listdir(directory)
    if len(entries) == 1 and os.path.isdir(os.path.join(directory, entries[0])):
        return os.path.join(directory, entries[0])
    return directory


def subdir_of(root, subdir, what):
    if not subdir:
        return root
    path = os.path.join(root, safe_name(subdir))
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


def _has_commit(bare, commit):
    """Whether the bare repository already holds `commit`."""
    probe = ["git", "-C", bare, "cat-file", "-e", commit + "^{commit}"]
    return (
        subprocess.run(probe, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    )


def git_export(repo, commit, subdir, cache_dir, target):
    """Export `commit` (path `subdir` of it) of `repo` into `target`; returns the full sha.

    A bare repository per origin in the cache keeps later fetches incremental.
    """
    key = hashlib.sha256(repo.encode()).hexdigest()[:16]
    bare = os.path.join(cache_dir, "git", key)
    if not os.path.isdir(os.path.join(bare, "objects")):
        os.makedirs(bare)
        _git(["init", "--bare", "-q", bare])
    if not _has_commit(bare, commit):
        try:
            _git(["-C", bare, "fetch", "-q", repo, commit])
        except FetchError as by_sha:
            # Servers that refuse a fetch by sha (protocol v0 without
            # uploadpack.allowReachableSHA1InWant): take every branch and tag instead.
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
            if not _has_commit(bare, commit):
                raise FetchError(
                    f"commit {commit} is not in {repo}: fetching it failed ({by_sha}) and no "
                    "branch or tag there contains it"
                ) from None
    full = _git(["-C", bare, "rev-parse", "--verify", "-q", commit + "^{commit}"])
    treeish = full + (":" + safe_name(subdir) if subdir else "")
    fd, tarball = tempfile.mkstemp(dir=cache_dir, prefix=".export-", suffix=".tar")
    os.close(fd)
    try:
        try:
            _git(["-C", bare, "archive", "--format=tar", "-o", tarball, treeish])
        except FetchError:
            raise FetchError(f"commit {full} of {repo} has no directory '{subdir}'") from None
        unpack(tarball, target)
    finally:
        unlink_quietly(tarball)
    return full


# -- identity -----------------------------------------------------------------------------


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


def matches(marker, ident):
    """Whether a source marker records the same source as `ident` (see `identity`)."""
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
