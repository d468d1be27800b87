# Runs first inside the target interpreter (python -c); the runner defines MARK and
# PROVENANCE_FILE above it (sm120kit.remote.lib.targets.target_source).
import json, os, sys

ARGS = json.loads(sys.argv[1])


def _err(e):
    text = "%s: %s" % (type(e).__name__, e)
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1] if len(lines) == 1 else " | ".join(lines[-3:])


def _emit(obj):
    sys.stdout.write("\n" + MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _fake_gpu(major, minor, memory_mib=None):
    """Without a GPU, make torch.cuda answer as one device of capability major.minor (the
    driver stub): what the loader and import-time code ask, nothing that runs a kernel.
    `memory_mib`: the total memory it reports (mem_get_info, get_device_properties; sglang's
    memory defaults read it when nvidia-smi is absent), 1 GiB when not given."""
    import torch

    total = int(memory_mib or 1024) << 20

    class _Props(object):
        pass

    props = _Props()
    props.major, props.minor, props.name = major, minor, "sm120kit fake GPU %d.%d" % (major, minor)
    props.multi_processor_count, props.total_memory = 1, total
    c = torch.cuda
    c.is_available = lambda: True
    c.device_count = lambda: 1
    c.current_device = lambda: 0
    c.set_device = lambda *a, **k: None
    c.get_device_capability = lambda *a, **k: (major, minor)
    c.get_device_properties = lambda *a, **k: props
    c.get_device_name = lambda *a, **k: props.name
    c.mem_get_info = lambda *a, **k: (total, total)


def _present_gpu(args, engine):
    """The GPU a resolver's engine sees, as (what it is, whether it is faked): the host's own
    when torch.cuda has one, else, with args["cc"], one faked GPU of that capability and
    args["memory_mib"] (_fake_gpu), else none. `engine` names who sees it, in the words."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        major, minor = torch.cuda.get_device_capability(0)
        return "the host's GPU: %s (%d.%d)" % (name, major, minor), False
    if not args.get("cc"):
        return "no GPU and no target arch: %s sees no CUDA device" % engine, False
    major, minor = args["cc"][0], args["cc"][1]
    _fake_gpu(major, minor, args.get("memory_mib"))
    return (
        "no GPU: torch.cuda faked as one GPU of capability %d.%d, %s MiB"
        % (major, minor, args.get("memory_mib") or 1024),
        True,
    )
