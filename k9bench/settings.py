"""Typed run settings: each setting's type, default, flag and help live in one place.

A stage's settings are a frozen dataclass whose fields are declared with :func:`setting`.
The scripts generate their argparse flags from those fields (:func:`add_arguments`, in the
manner of transformers' ``HfArgumentParser``) and build the object once in ``main()`` with
:func:`from_namespace`; engines take the object, never an ``argparse.Namespace``, and nothing
writes into it afterwards (derive a new one with :func:`dataclasses.replace`).

A field declared with ``result=True`` can change a run's numbers (model, frames, prompt,
generation...). :func:`result_fingerprint` collects those fields from any number of settings
objects, and :func:`fingerprint_differences` compares two fingerprints: every resumable stage
uses the pair to refuse mixing records made with different settings.

Example::

    @dataclass(frozen=True)
    class FrameSettings:
        max_frames: int = setting(32, "frame budget per video (default: %(default)s)",
                                  type=non_negative_int, result=True)

    add_arguments(parser.add_argument_group("video frames"), FrameSettings)
    frames = from_namespace(FrameSettings, parser.parse_args(argv))
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from typing import Any, Iterable

from k9bench.validators import str2bool

_ARGPARSE_KEYS = ("type", "choices", "metavar", "action", "nargs", "const", "required")


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    flags: tuple[str, ...] | None = None,
    result: bool = False,
    cli: bool = True,
    default_factory: Any = dataclasses.MISSING,
    **argparse_kwargs: Any,
) -> Any:
    """A settings field: its default, its help text (``%(default)s`` allowed) and its flag.

    ``flags`` defaults to ``("--<field name>",)``; ``result`` marks a setting that changes the
    numbers a run produces (part of :func:`result_fingerprint`); ``cli=False`` keeps the field off
    the command line (set by code, e.g. a value derived in ``main``). Other keyword arguments
    (``type``, ``choices``, ``metavar``, ``action``, ``nargs``, ``const``) go to ``add_argument``;
    without ``type`` the field's annotation decides (``bool`` -> True/False text, ``int``, ``float``).
    """
    unknown = set(argparse_kwargs) - set(_ARGPARSE_KEYS)
    if unknown:
        raise TypeError(f"setting(): unknown argparse keywords {sorted(unknown)}")
    metadata = {"help": help, "flags": flags, "result": result, "cli": cli, "argparse": argparse_kwargs}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def default_of(cls: type, name: str) -> Any:
    """The declared default of field ``name`` of settings class ``cls`` (for a flag a script adds by hand)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                return f.default_factory()  # type: ignore[misc]
            raise KeyError(f"{cls.__name__}.{name} has no default")
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def _base_type(cls: type, f: dataclasses.Field) -> Any:
    hints = typing.get_type_hints(cls)
    hint = hints.get(f.name, str)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else str
    return hint


def add_arguments(
    target: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    *,
    only: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
) -> None:
    """Add one flag per command-line field of settings class ``cls`` to ``target``."""
    wanted = set(only) if only is not None else None
    skipped = set(exclude)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if not meta or not meta.get("cli", True) or f.name in skipped or (wanted is not None and f.name not in wanted):
            continue
        kwargs = dict(meta["argparse"])
        action = kwargs.get("action")
        if action not in ("store_true", "store_false", "count") and "type" not in kwargs and not isinstance(action, type):
            base = _base_type(cls, f)
            if base is bool:
                kwargs["type"] = str2bool
            elif base in (int, float):
                kwargs["type"] = base
        flags = meta["flags"] or (f"--{f.name}",)
        target.add_argument(*flags, dest=f.name, default=default_of(cls, f.name), help=meta["help"], **kwargs)


def from_namespace(cls: type, namespace: argparse.Namespace, **overrides: Any) -> Any:
    """Build settings class ``cls`` from parsed arguments (fields absent from the namespace keep
    their defaults); ``overrides`` win over both."""
    values = {f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls) if f.init and hasattr(namespace, f.name)}
    values.update(overrides)
    return cls(**values)


def flags_given(cls: type, obj: Any) -> list[str]:
    """The flags of ``cls`` whose values in ``obj`` differ from their defaults (for warnings
    about flags that do nothing in the chosen mode)."""
    given = []
    for f in dataclasses.fields(cls):
        if f.metadata and f.metadata.get("cli", True):
            if getattr(obj, f.name) != default_of(cls, f.name):
                given.append((f.metadata["flags"] or (f"--{f.name}",))[0])
    return given


def to_dict(obj: Any) -> dict[str, Any]:
    """The settings object as plain JSON-ready data (nested settings included)."""
    return dataclasses.asdict(obj)


def result_fingerprint(*objects: Any) -> dict[str, Any]:
    """The fields marked ``result=True`` of the given settings objects, by field name."""
    out: dict[str, Any] = {}
    for obj in objects:
        if obj is None:
            continue
        for f in dataclasses.fields(obj):
            if f.metadata and f.metadata.get("result"):
                value = getattr(obj, f.name)
                out[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return out


def _json_normal(value: Any) -> Any:
    """A value as JSON would give it back (tuples become lists, keys strings), so that a fingerprint
    read from a file compares equal to the one computed now."""
    return json.loads(json.dumps(value, default=str))


def _walk_differences(old: Any, new: Any, path: str, out: list[str], partial: bool = False) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        keys = list(new) if partial else sorted(set(old) | set(new), key=str)
        for key in keys:
            _walk_differences(old.get(key), new.get(key), f"{path}.{key}" if path else str(key), out, partial)
    elif old != new:
        out.append(f"{path}: {old!r} in the existing file, {new!r} now")


def fingerprint_differences(prior: dict[str, Any], current: dict[str, Any], *, partial: bool = False) -> list[str]:
    """Human-readable differences between two fingerprints, nested dicts compared key by key
    (``frames.max_frames: 32 in the existing file, 16 now``). This is the one comparison every resume
    decision uses (the stage contract, the inference runner, the judge).

    A top-level key missing on one side counts only when the other side has a value other than None
    (an older file may lack a newer setting). With ``partial`` only the keys of ``current`` are
    compared, at every depth, and a top-level key that ``prior`` lacks is not compared at all: a check
    made with what is known before a model loads compares part of the settings, a later one the rest."""
    old, new = _json_normal(prior or {}), _json_normal(current or {})
    keys = list(new) if partial else sorted(set(old) | set(new), key=str)
    diffs: list[str] = []
    for key in keys:
        if key not in old and (partial or new.get(key) is None):
            continue
        if key not in new and old.get(key) is None:
            continue
        _walk_differences(old.get(key), new.get(key), str(key), diffs, partial)
    return diffs


def field_docs(cls: type) -> dict[str, str]:
    """Field name -> help text (``%(default)s`` filled in), for documentation of artifacts."""
    docs = {}
    for f in dataclasses.fields(cls):
        text = (f.metadata or {}).get("help", "")
        try:
            default = default_of(cls, f.name)
        except KeyError:
            default = None
        docs[f.name] = text.replace("%(default)s", str(default)).replace("%%", "%")
    return docs
