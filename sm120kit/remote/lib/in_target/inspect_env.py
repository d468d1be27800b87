# Runs inside the target interpreter (python -c), after prelude.py: ARGS, _err, _emit, MARK
# and PROVENANCE_FILE come from there (sm120kit.remote.lib.targets.target_source).
import re, site, importlib.machinery, importlib.util
import importlib.metadata as md


def norm(n):
    return re.sub(r"[-_.]+", "-", n).lower()


dists = {}
for d in md.distributions():
    try:
        name = d.metadata["Name"]
    except Exception:
        name = None
    if name and norm(name) not in dists:
        dists[norm(name)] = d
out = {
    "executable": os.path.realpath(sys.executable),
    "prefix": sys.prefix,
    "version": sys.version.split()[0],
    "ext_suffixes": list(importlib.machinery.EXTENSION_SUFFIXES),
    "packages": {},
    "site_packages": [],
    "torch_dir": None,
    "torch_dist_version": None,
    "sys_path": [p for p in sys.path if p],
    # The variables the JIT packages' toolchain lookups read, as this interpreter sees them
    # after site's .pth files ran (the tool's sm120kit_cuda_home.pth sets CUDA_HOME there).
    "environ": {
        k: v
        for k, v in os.environ.items()
        if re.search(r"CUDA|NVCC|HUMMING|FLASHINFER|CUTE_DSL", k) or k == "PATH"
    },
}
try:
    out["site_packages"] = list(site.getsitepackages())
except Exception:
    pass
try:
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        out["torch_dir"] = os.path.dirname(os.path.realpath(spec.origin))
    out["torch_dist_version"] = md.version("torch")
except Exception:
    pass
if ARGS.get("all_dists"):
    # Every distribution the env holds (name -> version), so that "is X installed" is read
    # from the env itself, not from a list the caller guessed.
    out["installed"] = {k: d.version for k, d in sorted(dists.items())}
shlib = re.compile(r"\.so(\.\d+)*$")
aliases = ARGS.get("distributions") or {}
for name in ARGS["packages"]:
    # A package published under several names (renamed on PyPI): the first
    # installed one, reported under the name asked for.
    d = None
    for candidate in [name] + list(aliases.get(name) or []):
        d = dists.get(norm(candidate))
        if d is not None:
            break
    if d is None:
        out["packages"][name] = {"installed": False}
        continue
    files = list(d.files or [])
    libs, tops = [], set()
    for f in files:
        rel = f.as_posix()
        if rel.startswith("..") or ".dist-info/" in rel or "__pycache__" in rel:
            continue
        first = rel.split("/")[0]
        if rel.endswith(".py") or shlib.search(rel):
            tops.add(first[:-3] if first.endswith(".py") else first)
        if not shlib.search(rel):
            continue
        mod = None
        for suf in sorted(out["ext_suffixes"], key=len, reverse=True):
            if rel.endswith(suf):
                mod = rel[: -len(suf)].replace("/", ".")
                break
        lib = {"path": os.path.realpath(str(f.locate())), "rel": rel, "module": mod}
        # What the installer wrote in RECORD for it: smoke trusts the catalogue's reading of
        # the wheel only for a file the install record still describes.
        if f.hash is not None and f.hash.mode == "sha256":
            lib["record"] = {"sha256": f.hash.value, "size": f.size}
        libs.append(lib)
    top_txt = d.read_text("top_level.txt")
    if top_txt:
        tops = (
            set(t.strip() for t in top_txt.splitlines() if t.strip() and not t.startswith("_"))
            or tops
        )
    base = os.path.realpath(str(d.locate_file("")))
    top_list = []
    for t in sorted(tops):
        if "." in t or t.endswith(".so") or shlib.search(t):
            continue
        if os.path.isdir(os.path.join(base, t)) or os.path.isfile(os.path.join(base, t + ".py")):
            top_list.append(t)
        elif any(l["module"] == t for l in libs):
            top_list.append(t)
    provenance = None
    try:
        text = d.read_text(PROVENANCE_FILE)
        if text is not None:
            provenance = json.loads(text)
            if not isinstance(provenance, dict):
                provenance = {"error": "%s is not a JSON object" % PROVENANCE_FILE}
    except Exception as e:
        provenance = {"error": "%s unreadable: %s" % (PROVENANCE_FILE, _err(e))}
    # The installer's record of the wheel file it installed (PEP 610 direct_url.json; pip and
    # uv write archive_info.hashes for a wheel from a file or a URL): release facts are keyed
    # by that sha256, whatever env or recipe the wheel is now in.
    wheel_sha = None
    try:
        direct = json.loads(d.read_text("direct_url.json") or "{}")
        archive = (direct.get("archive_info") if isinstance(direct, dict) else None) or {}
        wheel_sha = (archive.get("hashes") or {}).get("sha256")
        if not wheel_sha and str(archive.get("hash") or "").startswith("sha256="):
            wheel_sha = str(archive["hash"])[7:]
    except Exception:
        wheel_sha = None
    out["packages"][name] = {
        "installed": True,
        "wheel_sha256": wheel_sha if isinstance(wheel_sha, str) else None,
        "distribution": d.metadata["Name"],
        "version": d.version,
        "requires": list(d.requires or []),
        "location": base,
        "top_level": top_list,
        "libraries": libs,
        "provenance": provenance,
    }
_emit(out)
