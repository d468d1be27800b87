"""Locks and the recipe's ``[stack]``: loading, strict errors naming file, line and key, and
the shipped locks' facts (sm120kit/stack/lock.py; docs/stack-facts.md section 9).

Real files only: the repo's recipes and locks, and lock/recipe files written to tmp dirs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from sm120kit.errors import RecipeError
from sm120kit.recipes.select import load_recipes
from sm120kit.stack.lock import dump_lock, load_lock, parse_lock

REPO = Path(__file__).resolve().parents[2]
SHA = "0" * 63 + "1"

GOOD = f"""\
lock-version = "1.0"
requires-python = "==3.11.*"
created-by = "sm120kit"

[tool.sm120kit]
top = "demo==1.0"
python = "3.11"
platform = "manylinux_2_34_x86_64"
torch = "2.14.1"
torch_cuda = "13.0"
resolver = "uv 0.13.9 pip compile"
drafted = "2026-12-02"

[[packages]]
name = "demo"
version = "1.0"
wheels = [{{ name = "demo-1.0-py3-none-any.whl", url = "https://example.invalid/demo-1.0-py3-none-any.whl", hashes = {{ sha256 = "{SHA}" }} }}]

[packages.tool.sm120kit]
from = "release"
compiled = false

[[packages]]
name = "torch"
version = "2.14.1"
wheels = [{{ url = "https://example.invalid/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", size = 12, hashes = {{ sha256 = "{SHA}" }} }}]

[packages.tool.sm120kit]
from = "release"
compiled = true
"""


def _lock(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "demo.toml"
    path.write_text(text)
    return path


def test_a_lock_loads_and_round_trips(tmp_path: Path) -> None:
    lock = load_lock(_lock(tmp_path, GOOD))
    assert lock.top_name == "demo" and lock.torch == "2.14.1"
    assert [e.name for e in lock.packages] == ["demo", "torch"]
    assert lock.entry("Torch") is lock.packages[1]
    again = parse_lock(tmp_path / "x.toml", dump_lock(lock, ["header"]))
    assert again.packages == lock.packages and again.top == lock.top


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (
            ("compiled = false", "compiled = false\nsha = 1"),
            ":22: packages[0].tool.sm120kit.sha: unknown key",
        ),
        (
            (
                f'size = 12, hashes = {{ sha256 = "{SHA}" }}',
                'size = 12, hashes = { sha256 = "abc" }',
            ),
            ":26: packages[1].wheels.hashes: expected { sha256 = <64 lower-case hex> }",
        ),
        (
            ('from = "release"\ncompiled = false', 'from = "pypi"\ncompiled = false'),
            ":20: packages[0].tool.sm120kit.from: 'pypi' is not one of",
        ),
        (
            ('torch = "2.14.1"', 'torch = "2.13.0"'),
            ":9: tool.sm120kit.torch: 2.13.0 differs from the torch entry's 2.14.1",
        ),
        (
            ('top = "demo==1.0"', 'top = "demo>=1.0"'),
            ":6: tool.sm120kit.top: 'demo>=1.0' must pin one version exactly",
        ),
        (
            ('top = "demo==1.0"', 'top = "other==1.0"'),
            ":6: tool.sm120kit.top: other==1.0 is not among the lock's packages",
        ),
        (('drafted = "2026-12-02"\n', ""), ": tool.sm120kit: missing required key 'drafted'"),
        (
            ('requires-python = "==3.11.*"', 'requires-python = ">=3.11"'),
            ":2: requires-python: expected '==3.11.*'",
        ),
        (
            ('lock-version = "1.0"', 'lock-version = "2.0"'),
            ':1: lock-version: expected "1.0" (PEP 751)',
        ),
        (("size = 12, ", "size = -1, "), ":26: packages[1].wheels.size: expected a byte count"),
        (("[tool.sm120kit]\n", "[tool.other]\n"), ": tool.sm120kit: missing"),
    ],
)
def test_bad_locks_name_file_line_and_key(
    tmp_path: Path, edit: tuple[str, str], where: str
) -> None:
    old, new = edit
    assert old in GOOD
    path = _lock(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(RecipeError) as err:
        load_lock(path, "locks/demo.toml")
    msg = str(err.value)
    assert msg.startswith("locks/demo.toml") and where in msg and "\n" not in msg


def test_a_distribution_listed_twice_is_refused(tmp_path: Path) -> None:
    first = GOOD.index("[[packages]]")
    twice = GOOD + GOOD[first : GOOD.index("[[packages]]", first + 1)]
    with pytest.raises(RecipeError, match=r"demo.toml:\d+: packages.name: demo is listed twice"):
        load_lock(_lock(tmp_path, twice))


def _recipes_with(tmp_path: Path, name: str, *edits: tuple[str, str]) -> Path:
    folder = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", folder)
    shutil.copytree(REPO / "patches", tmp_path / "patches")
    path = folder / f"{name}.toml"
    text = path.read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new, 1)
    path.write_text(text)
    return folder


def test_repo_recipes_name_their_stacks() -> None:
    recipes = load_recipes(REPO / "recipes")
    tops = {name: r.stack.top for name, r in recipes.items() if r.stack is not None}
    assert tops == {
        "r570": "sglang==0.5.9",
        "r575": "sglang==0.5.9",
        "r580": "sglang==0.5.23",
        "r590": "sglang==0.5.23",
        "r595": "sglang==0.5.23",
    }
    new, old = recipes["r580"].lock, recipes["r570"].lock
    assert new is not None and old is not None
    assert "libcudart.so.13" in recipes["r570"].stack.reason  # type: ignore[union-attr]
    assert (new.torch, new.torch_cuda, old.torch, old.torch_cuda) == (
        "2.14.1",
        "13.0",
        "2.9.1",
        "12.8",
    )
    kernel = new.entry("sglang-kernel")
    assert kernel is not None and kernel.version == "0.4.10" and kernel.compiled
    assert kernel.sha256 == "043cbe4a10e7887ea1b25599b729ff1ce115a0d5217b2c177aff9f9ae5327724"
    assert kernel.size == 373_008_902 and kernel.verdict == "ok"
    sgl = old.entry("sgl-kernel")
    assert sgl is not None and sgl.version == "0.3.21" and sgl.size == 535_601_072
    assert sgl.verdict == "ok" and any("minor-version compatibility" in n for n in sgl.notes)
    for lock in (new, old):
        assert all(e.url.startswith("https://files.pythonhosted.org/") for e in lock.packages)


#: r580's stack is recipes/shared/stacks.toml's cu13 line: a bad key there is named at that
#: file's line, with the recipe whose stack it is.
_CU13 = r"shared/stacks\.toml:\d+: stacks\.cu13"


@pytest.mark.parametrize(
    ("file", "old", "new", "expect"),
    [
        (
            "r580",
            "[stack]\n",
            "[stack]\nbuidl = []\n",
            r"r580\.toml:\d+: stack\.buidl: unknown key; allowed: build, engines, indexes, loaders, locks",
        ),
        (
            "shared/stacks",
            'top = "sglang==0.5.23"',
            'top = "sglang==0.5.22"',
            _CU13 + r"\.top: 'sglang==0\.5\.22' differs from locks/.*\(stack of .*r580\.toml\)",
        ),
        (
            "shared/stacks",
            'top = "sglang==0.5.23"',
            'top = "sglang>=0.5"',
            _CU13 + r"\.top: 'sglang>=0\.5' must pin one version exactly",
        ),
        (
            "r580",
            "[stack]\n",
            '[stack]\nbuild = ["nosuch"]\n',
            r"r580\.toml:\d+: stack\.build: nosuch is not a distribution of locks/",
        ),
        (
            "shared/stacks",
            'locks = "locks/',
            'locks = "/abs/locks/',
            _CU13 + r"\.locks: '/abs/locks/.*' must be a directory relative",
        ),
        (
            "shared/stacks",
            'locks = "locks/',
            'locks = "locks/missing-',
            r"^locks/missing-sglang.*: cannot read the lock directory",
        ),
        (
            "shared/stacks",
            'locks = "locks/sglang-0.5.23"',
            'lock = "locks/sglang-0.5.23-cp311-manylinux_2_34_x86_64.toml"',
            _CU13 + r"\.lock: replaced by locks = ",
        ),
        (
            "r580",
            'python = ["3.11", "3.12", "3.13"]',
            'python = ["3.10"]',
            r"r580\.toml:\d+: python: locks/sglang-0\.5\.23 has locks for Python 3\.11, 3\.12, none for",
        ),
        (
            "r580",
            'use = "cu13"',
            'use = "cu14"',
            r"r580\.toml:\d+: stack\.use: 'cu14' is not a stack of .*shared/stacks\.toml; it has: cu13, cu13-vllm, cu12",
        ),
        (
            "r580",
            'use = "flash-attn==2.8.3.post2"',
            'use = "flash-attn==2.8.3.post3"',
            r"r580\.toml:\d+: packages\[2\]\.use: 'flash-attn==2\.8\.3\.post3' is not an entry of "
            r".*shared/packages\.toml \(did you mean 'flash-attn==2\.8\.3\.post2'\?\)",
        ),
        (
            "r580",
            'use = "minikernel==0.1.0"\n',
            'use = "minikernel==0.1.0"\nknobs = {}\n',
            r"r580\.toml:\d+: packages\[0\]\.knobs: an entry with 'use' is the shared entry whole",
        ),
        (
            "shared/stacks",
            'torch = { version = "2.14.1"',
            'torch = { version = "2.14.0"',
            _CU13 + r"\.torch\.version: '2\.14\.0' differs from locks/sglang-0\.5\.23/.*'s torch "
            r"2\.14\.1: a recipe has one torch, its lock's \(stack of .*r580\.toml\)",
        ),
        (
            "shared/stacks",
            'cuda = "13.0" }',
            'cuda = "13.0", indx = "pypi" }',
            _CU13 + r"\.torch\.indx: unknown key",
        ),
        (
            "r580",
            '[stack]\nuse = "cu13"\n',
            "",
            r"r580\.toml: missing \[torch\]: a recipe whose \[stack\] does not use a shared "
            r"stack with a torch",
        ),
        (
            "shared/packages",
            'version = "2.8.3.post2"',
            'version = "2.8.3"',
            r"shared/packages\.toml:\d+: packages\[2\]\.version: flash-attn==2\.8\.3 is listed twice",
        ),
        (
            "shared/packages",
            'source = { kind = "path", path = "examples/minikernel" }',
            'source = { kind = "path", path = "examples/minikernel", ref = "x" }',
            r"shared/packages\.toml:\d+: packages\[0\]\.source\.ref: unknown key",
        ),
    ],
)
def test_bad_stack_tables_name_file_line_and_key(
    tmp_path: Path, file: str, old: str, new: str, expect: str
) -> None:
    """A bad key of a recipe, or of a shared table it uses, is one line naming that file, the
    line and the key."""
    folder = _recipes_with(tmp_path, file, (old, new))
    with pytest.raises(RecipeError, match=expect) as err:
        load_recipes(folder)
    assert "\n" not in str(err.value)


def test_a_build_candidate_must_admit_the_locks_torch(tmp_path: Path) -> None:
    """r570 pins sgl-kernel 0.3.21's source for torch 2.9.1, the torch its lock holds; a pin
    for another torch (with the stack's torch, recipes/shared/stacks.toml's cu12 line, moved
    along) cannot build for this lock."""
    folder = _recipes_with(tmp_path, "shared/packages", ('torch = "==2.9.1"', 'torch = "==2.9.0"'))
    path = folder / "shared" / "stacks.toml"
    old = 'torch = { version = "2.9.1"'
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, 'torch = { version = "2.9.0"', 1))
    with pytest.raises(
        RecipeError,
        match=r"stacks\.toml:\d+: stacks\.cu12\.locks: the recipe's sgl-kernel 0\.3\.21 entry "
        r"wants torch '==2\.9\.0'.*\(stack of .*r570\.toml\)",
    ):
        load_recipes(folder)


def test_a_host_glibc_older_than_the_locks_platform_is_named() -> None:
    from sm120kit.stack.choice import glibc_problem

    lock = load_recipes(REPO / "recipes")["r580"].lock
    assert lock is not None and lock.platform == "manylinux_2_34_x86_64"
    assert glibc_problem(lock, "2.35") is None and glibc_problem(lock, None) is None
    assert glibc_problem(lock, "2.31") == (
        "glibc 2.31 is older than 2.34, which pylock.cp311-manylinux_2_34_x86_64.toml "
        "(manylinux_2_34_x86_64) needs"
    )


def test_an_old_format_lock_names_the_conversion(tmp_path: Path) -> None:
    """A lock in the earlier format ([lock], [[package]]) is refused with one line naming
    `invoke lock.convert`; converting it gives the PEP 751 lock with every field kept."""
    from sm120kit.stack.convert import convert_lock

    lock = load_lock(_lock(tmp_path, GOOD))
    old = [
        "[lock]",
        'top = "demo==1.0"\npython = "3.11"\nplatform = "manylinux_2_34_x86_64"',
        'torch = "2.14.1"\ntorch_cuda = "13.0"\nresolver = "pip"\ndrafted = "2026-12-02"',
    ]
    for e in lock.packages:
        old += ["[[package]]"] + [
            f"{k} = {v!r}".replace("'", '"').replace("False", "false").replace("True", "true")
            for k, v in e.to_dict().items()
        ]
    path = tmp_path / "demo-1.0-cp311-manylinux_2_34_x86_64.toml"
    path.write_text("\n".join(old) + "\n")
    with pytest.raises(RecipeError) as err:
        load_lock(path)
    msg = str(err.value)
    assert "earlier format" in msg and "invoke lock.convert --path" in msg and "\n" not in msg
    out = convert_lock(path, root=tmp_path)
    assert out == tmp_path / "locks" / "demo-1.0" / "pylock.cp311-manylinux_2_34_x86_64.toml"
    again = load_lock(out)
    assert again.packages == lock.packages and again.torch == "2.14.1"
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left


def test_a_stack_has_one_lock_per_python() -> None:
    """`stack_locks` gives each Python's lock of the recipe's directory; `lock_for` one of
    them; `Recipe.lock` is the recipe's first Python's, and `stack.lock` names its file."""
    from sm120kit.stack.lock import lock_for, stack_locks

    recipe = load_recipes(REPO / "recipes")["r580"]
    assert recipe.stack is not None and recipe.lock is not None
    locks = stack_locks(recipe.stack, REPO)
    assert list(locks) == ["3.11", "3.12"]
    assert all(
        lock.top == "sglang==0.5.23" and len(lock.packages) == 207 for lock in locks.values()
    )
    assert recipe.lock.python == "3.11" and lock_for(recipe.stack, "3.13", REPO) is None
    assert lock_for(recipe.stack, "3.12", REPO) == locks["3.12"]
    assert recipe.stack.lock == "locks/sglang-0.5.23/pylock.cp311-manylinux_2_34_x86_64.toml"
    assert recipe.lock.label == "sglang-0.5.23-cp311-manylinux_2_34_x86_64"


@pytest.mark.parametrize(
    ("pythons", "want"),
    [("3.11", "3.11"), (["3.12", "3.11"], "3.12"), (["3.13", "3.11", "3.12"], "3.11")],
)
def test_the_recipes_order_of_pythons_picks_its_lock(pythons: Any, want: str) -> None:
    from sm120kit.stack.lock import load_stack

    recipe = load_recipes(REPO / "recipes")["r580"]
    assert recipe.stack is not None

    def error(key: tuple[str, ...], problem: str) -> RecipeError:
        return RecipeError(f"{'.'.join(key)}: {problem}")

    stack, lock = load_stack(recipe.stack, REPO, {}, error, pythons)
    assert lock.python == want and stack.lock.endswith(
        f"pylock.cp{want.replace('.', '')}-manylinux_2_34_x86_64.toml"
    )
