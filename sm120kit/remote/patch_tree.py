"""Check and apply unified-diff patches to a source tree (stdlib only; runs on hosts).

Arguments: ``{"tree": dir, "patches": [{"name": ..., "text": ..., "strip": 1}], "apply": bool}``.

Each patch is classified, in order and on top of the ones before it, as

- ``applies``: every hunk's old lines are found in the file (exact text; the hunk may sit at
  another line than its header says, nearest match wins),
- ``already applied``: the reversed patch applies, i.e. the new lines are there,
- ``does not apply``: neither; the result carries the first rejected hunk and what the file
  holds where the hunk was expected.

With ``apply`` the tree is changed only when no patch is ``does not apply``: every new file is
written beside its target first and then renamed over it, so a failure leaves the tree as it
was. Nothing here uses ``patch`` or ``git``: hosts need not have them.

Prints ``{"ok": bool, "applied": bool, "patches": [{"name", "state", "files", "rejected"}]}``.

Given ``{"steps": [...], "cleanup": [...]}`` instead, it runs the controller's steps through the
hosts' step interpreter (`sm120kit.remote.lib.steps`) with one more op, ``patch`` (tree,
patches: the above with ``apply``, failing when any patch does not apply).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile

from sm120kit.remote.lib.proc import StepFailed
from sm120kit.remote.lib.steps import apply

APPLIES = "applies"
ALREADY = "already applied"
REJECTED = "does not apply"

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_NO_EOL = "\\ No newline at end of file"


class DiffError(ValueError):
    """The patch text is not a well-formed unified diff."""


class Hunk:
    def __init__(self, old_start, old_len, new_start, new_len, section):
        self.old_start = old_start
        self.old_len = old_len
        self.new_start = new_start
        self.new_len = new_len
        self.section = section
        # (tag, text, has_newline); tag is ' ', '-' or '+'.
        self.lines = []

    def old(self):
        return [(t, eol) for tag, t, eol in self.lines if tag in " -"]

    def new(self):
        return [(t, eol) for tag, t, eol in self.lines if tag in " +"]

    def reversed(self):
        flipped = Hunk(self.new_start, self.new_len, self.old_start, self.old_len, self.section)
        swap = {"-": "+", "+": "-", " ": " "}
        flipped.lines = [(swap[tag], t, eol) for tag, t, eol in self.lines]
        return flipped

    def render(self):
        head = (
            f"@@ -{self.old_start},{self.old_len} +{self.new_start},{self.new_len} @@{self.section}"
        )
        body = []
        for tag, text, eol in self.lines:
            body.append(tag + text)
            if not eol:
                body.append(_NO_EOL)
        return "\n".join([head] + body)


class FilePatch:
    def __init__(self, old_path, new_path):
        self.old_path = old_path
        self.new_path = new_path
        self.hunks = []

    @property
    def creates(self):
        return self.old_path is None

    @property
    def deletes(self):
        return self.new_path is None

    def target(self):
        return self.new_path if self.new_path is not None else self.old_path

    def reversed(self):
        flipped = FilePatch(self.new_path, self.old_path)
        flipped.hunks = [h.reversed() for h in self.hunks]
        return flipped


def _path(raw, strip):
    name = raw.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith('"') and name.endswith('"'):
        name = name[1:-1]
    parts = [p for p in name.split("/") if p]
    if len(parts) <= strip:
        raise DiffError(f"path '{name}' has fewer than {strip} leading components to strip")
    parts = parts[strip:]
    if name.startswith("/") and strip == 0 or ".." in parts:
        raise DiffError(f"path '{name}' points outside the tree")
    return "/".join(parts)


def parse(text, strip=1):
    """Parse a unified diff into FilePatches. Lines before the first ``---`` are a header."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    files = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp = FilePatch(_path(line[4:], strip), _path(lines[i + 1][4:], strip))
            if fp.old_path is None and fp.new_path is None:
                raise DiffError("a file patch with /dev/null on both sides")
            files.append(fp)
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not files:
                raise DiffError(f"hunk at line {i + 1} before any '---'/'+++' header")
            hunk = Hunk(
                int(match.group(1)),
                int(match.group(2) or 1),
                int(match.group(3)),
                int(match.group(4) or 1),
                match.group(5),
            )
            i = _read_hunk(lines, i + 1, hunk)
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not files:
        raise DiffError("no '---'/'+++' file header found")
    for fp in files:
        if not fp.hunks:
            raise DiffError(f"file {fp.target()} has no hunks")
    return files


def _read_hunk(lines, i, hunk):
    old_left, new_left = hunk.old_len, hunk.new_len
    while i < len(lines) and (old_left > 0 or new_left > 0):
        line = lines[i]
        tag = line[:1] if line else " "  # some tools strip the space of blank context lines
        if tag not in " -+":
            first = hunk.render().split("\n")[0]
            raise DiffError(f"hunk {first} ends early at line {i + 1}")
        hunk.lines.append((tag, line[1:], True))
        if tag in " -":
            old_left -= 1
        if tag in " +":
            new_left -= 1
        i += 1
        if i < len(lines) and lines[i].startswith("\\"):
            t, text, _ = hunk.lines[-1]
            hunk.lines[-1] = (t, text, False)
            i += 1
    if old_left or new_left:
        raise DiffError("hunk {} is truncated".format(hunk.render().split("\n")[0]))
    return i


# -- applying in memory -------------------------------------------------------------------


def split_lines(data):
    """File text -> [(text, has_newline)]; a final line without newline is kept as such."""
    out = []
    for raw in data.splitlines(True):
        if raw.endswith("\n"):
            out.append((raw[:-1], True))
        else:
            out.append((raw, False))
    return out


def join_lines(lines):
    return "".join(t + ("\n" if eol else "") for t, eol in lines)


class Rejection(Exception):
    def __init__(self, path, hunk, reason, found=None):
        Exception.__init__(self, reason)
        self.path = path
        self.hunk = hunk
        self.reason = reason
        self.found = found

    def as_dict(self):
        return {
            "file": self.path,
            "hunk": self.hunk.render(),
            "reason": self.reason,
            "found": self.found,
        }


def _find(lines, old, expected, start):
    """Position where `old` (texts) occurs in `lines` at or after `start`, nearest `expected`."""
    n = len(old)
    texts = [t for t, _ in lines]
    best = None
    for pos in range(start, len(texts) - n + 1):
        if texts[pos : pos + n] != old:
            continue
        if best is None or abs(pos - expected) < abs(best - expected):
            best = pos
        if pos >= expected:
            break  # later matches are only farther away
    return best


def apply_file(fp, content):
    """Apply one FilePatch to `content` (text or None when absent); returns new text or None."""
    path = fp.target()
    if fp.creates:
        if content is not None:
            raise Rejection(path, fp.hunks[0], "file to create already exists")
        return join_lines([(t, eol) for h in fp.hunks for t, eol in h.new()])
    if content is None:
        raise Rejection(path, fp.hunks[0], "file does not exist")
    lines = split_lines(content)
    out = []
    cursor = 0
    offset = 0
    for hunk in fp.hunks:
        old = [t for t, _ in hunk.old()]
        # A hunk that removes nothing names the line it follows; otherwise its first line.
        base = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        expected = max(0, base + offset)
        pos = _find(lines, old, expected, cursor)
        if pos is None:
            lo = min(max(0, expected), len(lines))
            found = join_lines(lines[lo : lo + max(len(old), 1)])
            raise Rejection(
                path,
                hunk,
                f"context does not match at line {expected + 1} or anywhere after "
                f"line {cursor + 1}",
                found,
            )
        out.extend(lines[cursor:pos])
        original = lines[pos : pos + len(old)]
        olds = iter(original)
        for tag, text, eol in hunk.lines:
            if tag == " ":
                out.append(next(olds))  # the file's own line, with its own line ending
            elif tag == "-":
                next(olds)
            else:
                out.append((text, eol))
        cursor = pos + len(old)
        offset = pos - base
    out.extend(lines[cursor:])
    if fp.deletes:
        if out:
            raise Rejection(
                path, fp.hunks[-1], "file to delete has lines the patch does not remove"
            )
        return None
    return join_lines(out)


def classify(files, read):
    """(state, changes, rejection) for one parsed patch. `read(path)` -> text or None."""
    try:
        return APPLIES, _apply_all(files, read), None
    except Rejection as forward:
        try:
            _apply_all([fp.reversed() for fp in files], read)
        except Rejection:
            return REJECTED, {}, forward
        return ALREADY, {}, None


def _apply_all(files, read):
    changes = {}

    def current(path):
        return changes[path] if path in changes else read(path)

    for fp in files:
        # Renames are not supported: old and new names (a/x, b/x) denote the same file.
        changes[fp.target()] = apply_file(fp, current(fp.target()))
    return changes


# -- the tree -----------------------------------------------------------------------------


class Tree:
    """The files of a source tree, read lazily, with pending changes layered on top."""

    def __init__(self, root):
        self.root = root
        self.pending = {}

    def full(self, path):
        full = os.path.normpath(os.path.join(self.root, path))
        if os.path.commonpath([full, self.root]) != self.root:
            raise DiffError(f"path '{path}' points outside the tree")
        return full

    def read(self, path):
        if path in self.pending:
            return self.pending[path]
        full = self.full(path)
        if not os.path.isfile(full):
            return None
        with open(full, "rb") as fh:
            return fh.read().decode("utf-8", "surrogateescape")

    def write_all(self):
        """Write every pending change: all temp files first, then the renames."""
        staged = []
        try:
            for path, text in sorted(self.pending.items()):
                full = self.full(path)
                if text is None:
                    staged.append((None, full))
                    continue
                directory = os.path.dirname(full)
                if not os.path.isdir(directory):
                    os.makedirs(directory)
                fd, tmp = tempfile.mkstemp(dir=directory, prefix=".sm120kit-patch-")
                with os.fdopen(fd, "wb") as fh:
                    fh.write(text.encode("utf-8", "surrogateescape"))
                mode = os.stat(full).st_mode & 0o7777 if os.path.exists(full) else 0o644
                os.chmod(tmp, mode)
                staged.append((tmp, full))
        except BaseException:
            for tmp, _ in staged:
                if tmp:
                    os.unlink(tmp)
            raise
        for tmp, full in staged:
            if tmp is None:
                if os.path.exists(full):
                    os.unlink(full)
            else:
                os.replace(tmp, full)


def run(args):
    root = os.path.realpath(os.path.expanduser(args["tree"]))
    if not os.path.isdir(root):
        return {
            "ok": False,
            "applied": False,
            "error": f"tree {root} does not exist",
            "patches": [],
        }
    tree = Tree(root)
    results = []
    failed = False
    for patch in args.get("patches") or []:
        name = patch.get("name", "?")
        try:
            files = parse(patch["text"], int(patch.get("strip", 1)))
            for fp in files:
                for path in (fp.old_path, fp.new_path):
                    if path is not None:
                        tree.full(path)
        except DiffError as exc:
            failed = True
            results.append(
                {
                    "name": name,
                    "state": REJECTED,
                    "files": [],
                    "rejected": {"file": None, "hunk": "", "reason": str(exc), "found": None},
                }
            )
            continue
        state, changes, rejection = classify(files, tree.read)
        tree.pending.update(changes)
        failed = failed or state == REJECTED
        results.append(
            {
                "name": name,
                "state": state,
                "files": sorted({fp.target() for fp in files}),
                "rejected": rejection.as_dict() if rejection else None,
            }
        )
    applied = False
    if args.get("apply") and not failed and tree.pending:
        tree.write_all()
        applied = True
    return {"ok": not failed, "applied": applied, "tree": root, "patches": results}


def _patch_step(step, result):
    """Step op ``patch`` (tree, patches): apply them all, or change nothing and fail."""
    doc = run({"tree": step["tree"], "apply": True, "patches": step["patches"]})
    result["patches"] = doc["patches"]
    result["applied"] = doc["applied"]
    if not doc["ok"]:
        raise StepFailed(doc.get("error") or "a patch does not apply")


def main(argv):
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    if "steps" in args:
        # The controller's steps (copy, patch, marker, rename) through the step interpreter.
        result = apply(args, {"patch": _patch_step}, {"patches": [], "applied": False})
        sys.stdout.write(json.dumps(result) + "\n")
        return 0 if result["ok"] else 1
    try:
        result = run(args)
    except (KeyError, ValueError, OSError) as exc:
        result = {
            "ok": False,
            "applied": False,
            "error": f"{type(exc).__name__}: {exc}",
            "patches": [],
        }
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
