"""invoke's config files read as one clear line on any defect (issue #45 class 8).

invoke 2.2.1 (invoke/config.py ``Config._load_file``) reads ``/etc/invoke.yaml``,
``~/.invoke.yaml`` (and their ``.yml``/``.json``/``.py`` forms), the project's invoke.yaml and
the ``-f``/``INVOKE_RUNTIME_CONFIG`` runtime file with ``yaml.safe_load`` / ``json.load`` and
lets every error out as a traceback: a syntax error, a ``!!python/...`` tag (safe_load has no
constructor for it), a document that is a list or a string (``merge_dicts`` then fails with
AttributeError), bytes that are not UTF-8, a directory in the file's place. It also skips a
runtime file that does not exist without a word.

`check` wraps the loaders of ``invoke.config.Config`` so each of these becomes
`ConfigFileError`, one line naming the file (and the line, where the parser gives one), and
``_load_file`` so that error ends the program through ``cli.fail`` (exit 1, JSON under --json).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import invoke.config
from invoke.util import yaml

from ..errors import Sm120Error

_YAML_TAG = "tag:yaml.org,2002:"


class ConfigFileError(Sm120Error):
    """An invoke config file that cannot be read as a mapping of settings."""


def yaml_problem(path: str, exc: Exception) -> str:
    """One line for a YAML error: the file, the 1-based line, what is wrong."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path} line {mark.line + 1}" if mark is not None else path
    problem = str(getattr(exc, "problem", None) or exc)
    if problem.startswith("could not determine a constructor for the tag"):
        tag = problem.partition("tag ")[2].strip(" '").replace(_YAML_TAG, "!!")
        return (
            f"{where}: YAML tag {tag} is not allowed (config files are plain YAML: "
            "mappings, lists, strings, numbers, booleans)"
        )
    return f"{where}: not valid YAML: {' '.join(problem.split())}"


def _kind(data: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number"}.get(
        type(data), type(data).__name__
    )


def _document(path: str, data: Any) -> Any:
    if data is not None and not isinstance(data, Mapping):
        raise ConfigFileError(
            f"{path}: expected a mapping of settings at the top (e.g. 'sm120kit:'), got {_kind(data)}"
        )
    return data


def _read(path: str, parse: Callable[[Any], Any], what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return _document(path, parse(fh))
    except FileNotFoundError:
        raise  # invoke tries the next suffix
    except UnicodeDecodeError as exc:
        raise ConfigFileError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read the config file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigFileError(yaml_problem(path, exc)) from None
    except json.JSONDecodeError as exc:
        raise ConfigFileError(f"{path} line {exc.lineno}: not valid {what}: {exc.msg}") from None


def load_yaml(self: Any, path: str) -> Any:
    """``Config._load_yaml``: the document, or `ConfigFileError`."""
    return _read(str(path), yaml.safe_load, "YAML")


def load_json(self: Any, path: str) -> Any:
    """``Config._load_json``: the document, or `ConfigFileError`."""
    return _read(str(path), json.load, "JSON")


_ORIGINAL: dict[str, Any] = {}


def check(fail: Callable[[Exception], None]) -> None:
    """Install the checked loaders on ``invoke.config.Config``; `fail` ends the program with a
    one-line error (``cli.fail``). Once per process."""
    if _ORIGINAL:
        return
    config = invoke.config.Config
    _ORIGINAL.update(
        load_file=config._load_file, load_py=config._load_py, load_runtime=config.load_runtime
    )

    def load_py(self: Any, path: str) -> Any:
        try:
            return _document(path, _ORIGINAL["load_py"](self, path))
        except ConfigFileError:
            raise
        except Exception as exc:  # a user's Python config file may raise anything
            line = getattr(exc, "lineno", None)
            where = f"{path} line {line}" if line else path
            raise ConfigFileError(f"{where}: {type(exc).__name__}: {exc}") from None

    def load_file(self: Any, prefix: str, absolute: bool = False, merge: bool = True) -> None:
        try:
            _ORIGINAL["load_file"](self, prefix, absolute, merge)
        except (ConfigFileError, invoke.config.UnknownFileType) as exc:
            fail(exc)

    def load_runtime(self: Any, merge: bool = True) -> None:
        path = getattr(self, "_runtime_path", None)
        if path and not os.path.lexists(os.path.expanduser(str(path))):
            fail(
                ConfigFileError(
                    f"{path}: no such config file (given by -f or INVOKE_RUNTIME_CONFIG)"
                )
            )
        _ORIGINAL["load_runtime"](self, merge)

    config._load_yaml = load_yaml  # type: ignore[method-assign,assignment]
    config._load_yml = load_yaml  # type: ignore[method-assign,assignment]
    config._load_json = load_json  # type: ignore[method-assign,assignment]
    config._load_py = load_py  # type: ignore[method-assign,assignment]
    config._load_file = load_file  # type: ignore[method-assign,assignment]
    config.load_runtime = load_runtime  # type: ignore[method-assign,assignment]


__all__ = ["ConfigFileError", "check", "load_json", "load_yaml", "yaml_problem"]
