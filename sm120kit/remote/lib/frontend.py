"""The build front end's command line (pip or uv), shared by the host and the controller.

remote/build_wheel.py runs it; the controller shows the same line in `plan`
(`sm120kit.plays.build`). Stdlib only.
"""

from __future__ import annotations


def build_command(args, tmp_out):
    """The build front end's command line."""
    python = args["python"]
    pip_args = list(args.get("pip_args") or [])
    front_end = args.get("front_end") or "pip"
    if front_end == "uv":
        uv = args.get("uv") or "uv"
        return (
            [
                uv,
                "build",
                "--wheel",
                "--no-build-isolation",
                "--python",
                python,
                "--out-dir",
                tmp_out,
            ]
            + pip_args
            + [args["src"]]
        )
    if front_end != "pip":
        raise ValueError(f"front_end must be 'pip' or 'uv', not {front_end!r}")
    # -v: without it pip swallows the backend's output, and the log (and the OOM
    # diagnosis) would hold nothing of the compiler's.
    return (
        [python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v", "-w", tmp_out]
        + pip_args
        + [args["src"]]
    )
