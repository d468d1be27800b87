"""Put a pinned package source tree on a host (stdlib only; runs remotely, JSON in and out).

Arguments (``kind`` decides which of the others matter)::

    {"kind": "sdist" | "url" | "git" | "path", "dest": dir, "cache_dir": dir,
     # sdist: "package", "version", "sha256", "index_url" (PEP 503/691 simple index,
     #        default PyPI; a mirror's URL works), or "url" to skip the index look-up
     # url:   "url" (or "urls": [mirror, ..., origin], tried in order), "sha256"
     # git:   "repo" (URL or local path), "commit", "subdir"
     # path:  "tarball" (already on the host), "tree_sha256" (expected, optional)
     "subdir": "python/pkg"}

Archives are downloaded into ``cache_dir`` and their sha256 is checked before anything is
unpacked: a mismatch is an error naming the expected and actual hash, and leaves nothing
behind. Trees are unpacked into a temporary directory beside `dest` and renamed into place.
`dest` gets a ``.sm120kit-source.json`` marker; a later run whose request matches the marker
does no work (``"changed": false``).

Prints ``{"ok": bool, "changed": bool, "dest": dir, "identity": {...}, "tree_sha256": ...}`` or
``{"ok": false, "error": "..."}``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import urllib.parse
import urllib.request

from sm120kit.remote.lib.download import ChecksumMismatch, DownloadFailed
from sm120kit.remote.lib.download import download as download_file
from sm120kit.remote.lib.files import sha256_file
from sm120kit.remote.lib.sourcetree import (
    DEFAULT_INDEX,
    MARKER,
    FetchError,
    git_export,
    identity,
    matches,
    read_marker,
    sdist_links,
    single_top,
    subdir_of,
    tree_hash,
    unpack,
)

# -- downloads ----------------------------------------------------------------------------


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
        os.close(fd)
        try:
            download_file(url, part, sha256, timeout=120)
            os.replace(part, final)
            return final, True
        except ChecksumMismatch as exc:
            _rmdir_if_empty(slot)
            # A wrong file is not a reason to try the next mirror silently.
            raise FetchError(str(exc)) from None
        except DownloadFailed as exc:
            errors.append(str(exc))
    _rmdir_if_empty(slot)
    raise FetchError("; ".join(errors))


def _rmdir_if_empty(path):
    try:
        os.rmdir(path)
    except OSError:
        pass


# -- the step -----------------------------------------------------------------------------


def fetch(args):
    dest = os.path.abspath(os.path.expanduser(args["dest"]))
    cache_dir = os.path.abspath(
        os.path.expanduser(args.get("cache_dir") or os.path.join(os.path.dirname(dest), ".cache"))
    )
    ident = identity(args)
    marker = read_marker(dest)
    if matches(marker, ident):
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
            root = subdir_of(single_top(unpacked), args.get("subdir"), archive)
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
            root = subdir_of(unpacked, args.get("subdir"), tarball)
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
