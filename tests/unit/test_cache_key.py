"""The wheel-cache key: every input moves it, excluded knobs and paths do not, it is stable."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess

import pytest

from sm120kit.cache.key import (
    CACHE_FORMAT_VERSION,
    KeyInputs,
    canonical_json,
    compute_key,
    describe,
    filter_build_env,
    git_digest,
    patch_digests,
    sdist_digest,
    tree_digest,
)

SHA_A = "a" * 64
SHA_B = "b" * 64


def base_inputs(**changes: object) -> KeyInputs:
    fields: dict[str, object] = dict(
        package="flash-attn",
        version="2.8.3",
        source_digest="sha256:" + "1" * 64,
        patches=(("0001-sm120.patch", SHA_A),),
        build_env={"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "NVCC_APPEND_FLAGS": "-O3"},
        arch_list=("12.0",),
        cuda_version="13.0",
        torch_version="2.13.0+cu130",
        torch_cxx11_abi=True,
        python_abi="cp311",
        platform="linux_x86_64",
        cc_version="gcc 13.3.0",
    )
    fields.update(changes)
    return KeyInputs(**fields)  # type: ignore[arg-type]


#: Pinned on purpose. If this fails, the key recipe changed: that is only right together with
#: a deliberate bump of CACHE_FORMAT_VERSION (old entries must stop matching); then re-pin both.
GOLDEN_KEY = "5c467f7779a578684432fefbb9dc27b865228ace5777bba6e4cb508154cb2192"
GOLDEN_FORMAT = 1


def test_golden_key() -> None:
    assert CACHE_FORMAT_VERSION == GOLDEN_FORMAT
    assert compute_key(base_inputs()) == GOLDEN_KEY


def test_key_is_sha256_of_canonical_json() -> None:
    inputs = base_inputs()
    text = canonical_json(inputs)
    assert compute_key(inputs) == hashlib.sha256(text.encode()).hexdigest()
    assert json.loads(text)["format_version"] == CACHE_FORMAT_VERSION
    assert " " not in text.replace("gcc 13.3.0", "")


CHANGES = {
    "package": "sgl-kernel",
    "version": "2.8.4",
    "source_digest": "git:" + "2" * 40,
    "patches": (("0001-sm120.patch", SHA_B),),
    "build_env": {"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "NVCC_APPEND_FLAGS": "-O2"},
    "arch_list": ("12.0", "12.0a"),
    "cuda_version": "12.9",
    "torch_version": "2.13.0+cu129",
    "torch_cxx11_abi": False,
    "python_abi": "cp312",
    "platform": "manylinux_2_28_x86_64",
    "cc_version": "gcc 12.3.0",
    "format_version": CACHE_FORMAT_VERSION + 1,
    # sgl-kernel's FetchContent trees: one digest per dependency the tool supplies.
    "dependencies": (("cutlass", "tree:" + "3" * 64),),
}


@pytest.mark.parametrize("field_name", sorted(CHANGES))
def test_each_input_changes_the_key(field_name: str) -> None:
    assert compute_key(base_inputs(**{field_name: CHANGES[field_name]})) != compute_key(
        base_inputs()
    )


def test_every_key_field_is_covered() -> None:
    fields = {f.name for f in dataclasses.fields(KeyInputs) if f.compare}
    assert fields == set(CHANGES)


def test_patch_name_order_and_new_env_var_change_the_key() -> None:
    key = compute_key(base_inputs())
    assert compute_key(base_inputs(patches=(("other.patch", SHA_A),))) != key
    two = (("a.patch", SHA_A), ("b.patch", SHA_B))
    assert compute_key(base_inputs(patches=two)) != compute_key(base_inputs(patches=two[::-1]))
    env = {"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "NVCC_APPEND_FLAGS": "-O3", "FA_FOO": "1"}
    assert compute_key(base_inputs(build_env=env)) != key


@pytest.mark.parametrize(
    "extra",
    [
        {"MAX_JOBS": "1"},
        {"NVCC_THREADS": "4"},
        {"CMAKE_BUILD_PARALLEL_LEVEL": "16"},
        {"SGL_KERNEL_COMPILE_THREADS": "8"},
        {"MAKEFLAGS": "-j8"},
        {"HOME": "/home/builder"},
        {"PATH": "/usr/local/cuda/bin:/usr/bin"},
        {"CUDA_HOME": "/usr/local/cuda-13.0"},
        {"HOSTNAME": "gpu1"},
        {"CCACHE_DIR": "/var/cache/ccache"},
        {"SSH_CONNECTION": "10.0.0.1 22 10.0.0.2 5555"},
        {"SOME_TOOL_HOME": "anything"},
        {"BUILD_SCRATCH": "/scratch/job42"},
        {"EXTRA_INCLUDES": "/opt/a/include:/opt/b/include"},
        {"WORKDIR_REL": "./build"},
    ],
)
def test_excluded_knobs_and_paths_do_not_change_the_key(extra: dict[str, str]) -> None:
    env = {"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "NVCC_APPEND_FLAGS": "-O3", **extra}
    inputs = base_inputs(build_env=env)
    assert compute_key(inputs) == compute_key(base_inputs())
    assert set(extra) <= set(inputs.dropped_env)
    assert ("env ignored", ", ".join(inputs.dropped_env)) in describe(inputs)


def test_filter_build_env_keeps_compiler_knobs() -> None:
    kept, dropped = filter_build_env(
        {"TORCH_CUDA_ARCH_LIST": "12.0", "NVCC_APPEND_FLAGS": "-O3 -I/opt/x", "MAX_JOBS": 2}
    )
    assert kept == {"NVCC_APPEND_FLAGS": "-O3 -I/opt/x", "TORCH_CUDA_ARCH_LIST": "12.0"}
    assert dropped == ("MAX_JOBS",)


def test_key_is_stable_and_insensitive_to_dict_order() -> None:
    env = {"B": "2", "A": "1"}
    first = base_inputs(build_env=env)
    env["C"] = "3"  # a later change to the caller's dict must not move the key
    second = base_inputs(build_env={"A": "1", "B": "2"})
    assert compute_key(first) == compute_key(second)
    assert first == second


def test_roundtrip_through_dict() -> None:
    inputs = base_inputs()
    again = KeyInputs.from_dict(json.loads(json.dumps(inputs.to_dict())))
    assert again == inputs and compute_key(again) == compute_key(inputs)


def test_describe_lists_inputs_and_ends_with_the_key() -> None:
    rows = describe(base_inputs(build_env={"NVCC_APPEND_FLAGS": "-O3", "MAX_JOBS": "1"}))
    labels = [label for label, _ in rows]
    assert labels[:3] == ["package", "version", "source"]
    assert ("patch 0001-sm120.patch", SHA_A) in rows
    assert ("env NVCC_APPEND_FLAGS", "-O3") in rows
    assert ("env ignored", "MAX_JOBS") in rows
    assert ("torch cxx11 abi", "1") in rows
    assert rows[-1][0] == "key" and len(rows[-1][1]) == 64


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="patch x.patch"):
        base_inputs(patches=(("x.patch", "not-a-sha"),))
    with pytest.raises(ValueError):
        base_inputs(package="")
    with pytest.raises(ValueError):
        git_digest("abc123")


def test_source_digests(tmp_path) -> None:
    sdist = tmp_path / "pkg-1.0.tar.gz"
    sdist.write_bytes(b"sdist bytes")
    assert sdist_digest(sdist) == "sha256:" + hashlib.sha256(b"sdist bytes").hexdigest()
    assert git_digest("A" * 40) == "git:" + "a" * 40

    patch = tmp_path / "0001.patch"
    patch.write_text("--- a\n+++ b\n")
    assert patch_digests([patch]) == (
        ("0001.patch", hashlib.sha256(patch.read_bytes()).hexdigest()),
    )


def _make_tree(root) -> None:
    (root / "src").mkdir(parents=True)
    (root / "src" / "k.cu").write_text("__global__ void k() {}\n")
    (root / "setup.py").write_text("print('x')\n")
    (root / "build.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "build.sh", 0o755)


def test_tree_digest_ignores_location_and_vcs_but_sees_content_and_mode(tmp_path) -> None:
    one, two = tmp_path / "one", tmp_path / "elsewhere" / "two"
    _make_tree(one)
    _make_tree(two)
    subprocess.run(["git", "init", "-q", str(two)], check=True)
    (two / "src" / "__pycache__").mkdir()
    (two / "src" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\0")
    assert tree_digest(one) == tree_digest(two)
    assert tree_digest(one).startswith("tree:")

    os.chmod(two / "build.sh", 0o644)
    assert tree_digest(one) != tree_digest(two)
    os.chmod(two / "build.sh", 0o755)
    (two / "src" / "k.cu").write_text("__global__ void k() { }\n")
    assert tree_digest(one) != tree_digest(two)
