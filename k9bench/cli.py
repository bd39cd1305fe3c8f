"""Front-end helpers for the scripts' ``main()`` only (library modules never import this): the flags
every script shares (logging) and the one parser every front end builds (no abbreviated flags, secrets masked). Value types live in :mod:`k9bench.validators`;
logging setup in :mod:`k9bench.logs`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Mapping, Sequence


def add_logging_args(parser: argparse.ArgumentParser) -> None:
    """``-v/--verbose`` and ``-q/--quiet``."""
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for library logs too)")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in ``--help``, except where they say nothing or twice: no ``(default: None)`` or
    ``(default: [])``, none after an on/off flag, none after a help text that names its default itself."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, [], ()) or isinstance(action.default, bool) or "default" in text:
            return text
        return super()._get_help_string(action)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that no error line echoes a secret: an unknown ``--api_key sk-...`` is
    reported as ``--api_key ***``, and the credentials of a URL in a bad value are masked. Every
    secret on the command line is registered for masking by value before parsing. Every script builds
    its parser from this.

    It also answers which flags it accepts (:meth:`flag`, :meth:`accepts`), its argument groups' flags
    included, without argparse's private ``_actions``: each ``add_argument`` is noted as it is made.

    No long option is taken by a prefix (``allow_abbrev=False``, issue 40 item 5): ``--max_new_token 24``
    is an unknown flag, with the flag it resembles named, never a setting nobody typed."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _note(self, action: argparse.Action) -> argparse.Action:
        if "_flags" not in self.__dict__:
            self._flags: dict[str, argparse.Action] = {}
        for option in action.option_strings:
            self._flags[option] = action
        return action

    def add_argument(self, *args, **kwargs):  # noqa: D102 (argparse's)
        return self._note(super().add_argument(*args, **kwargs))

    def add_argument_group(self, *args, **kwargs):  # noqa: D102 (argparse's): its flags are noted here too
        return self._watch(super().add_argument_group(*args, **kwargs))

    def add_mutually_exclusive_group(self, **kwargs):  # noqa: D102 (argparse's): its flags are noted here too
        return self._watch(super().add_mutually_exclusive_group(**kwargs))

    def _watch(self, group):
        """``group``'s flags (and those of the groups made from it) are noted on this parser."""
        add, make_group, make_exclusive = group.add_argument, group.add_argument_group, group.add_mutually_exclusive_group
        group.add_argument = lambda *a, **kw: self._note(add(*a, **kw))
        group.add_argument_group = lambda *a, **kw: self._watch(make_group(*a, **kw))
        group.add_mutually_exclusive_group = lambda **kw: self._watch(make_exclusive(**kw))
        return group

    def flag(self, option: str) -> argparse.Action:
        """The action of ``option`` (``--max_frames``): its ``type``, ``choices`` and ``default``; KeyError if
        this parser has no such flag."""
        try:
            return self.__dict__.get("_flags", {})[option]
        except KeyError:
            raise KeyError(f"{self.prog} has no flag {option}") from None

    def accepts(self, option: str) -> bool:
        """Whether this parser has the flag ``option``."""
        return option in self.__dict__.get("_flags", {})

    def parse_values(self, values: Mapping[str, Any], args: Sequence[str] = ()) -> argparse.Namespace:
        """Parse ``args`` (the user's own ``*_ARGS``) over ``values`` given by flag (``{"--max_frames": 8,
        "--output_file": path, "--greedy": True}``): each value stands where the flag's default would, so ``args``
        still win, and a required flag given a value is satisfied. A text value goes through the flag's type and
        choices as on a command line (a launcher variable's text); any other value is taken as it is (a path, a
        number, a list for an ``nargs`` flag). ``True`` for a flag that takes no value (``store_true``,
        ``store_false``, ``store_const``) means it is given; ``False`` or None, that it is not. An unknown flag,
        or a bad text, is :meth:`error` (exit 2, one line), as a bad command line is."""
        namespace = argparse.Namespace()
        freed: list[argparse.Action] = []
        for option, value in values.items():
            if not self.accepts(option):
                self.error(f"unrecognized arguments: {option}")
            action = self.flag(option)
            if action.nargs == 0:
                if value:
                    setattr(namespace, action.dest, action.const)
                continue
            if value is None:
                continue
            setattr(namespace, action.dest, self._typed(action, option, value))
            if action.required:
                action.required = False
                freed.append(action)
        try:
            return self.parse_args(list(args), namespace)
        finally:
            for action in freed:
                action.required = True

    def _typed(self, action: argparse.Action, option: str, value: Any) -> Any:
        """A text or a path (or each of a list) as the flag's type and choices make it; other values as given."""
        if isinstance(value, (list, tuple)):
            return [self._typed(action, option, item) for item in value]
        if isinstance(value, os.PathLike):  # a path is its text, typed as the flag types it
            value = os.fspath(value)
        if not isinstance(value, str):
            return value
        try:
            typed = action.type(value) if callable(action.type) else value
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            why = str(exc) if isinstance(exc, argparse.ArgumentTypeError) else f"invalid value: {value!r}"
            self.error(f"argument {option}: {why}")
        if action.choices is not None and typed not in action.choices:
            self.error(f"argument {option}: invalid choice: {value!r} (choose from {', '.join(map(str, action.choices))})")
        return typed

    def parse_args(self, args=None, namespace=None):  # noqa: D102 (argparse's)
        from k9bench.redact import redact_argv, register_argv_secrets

        register_argv_secrets(sys.argv[1:] if args is None else list(args))
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(redact_argv(extras, self)) + self._suggest(extras))
        return parsed

    def _suggest(self, extras: Sequence[str]) -> str:
        """`` (did you mean --max_new_tokens?)`` for the first unknown long option close to one of ours."""
        import difflib

        for arg in extras:
            if arg.startswith("--"):
                close = difflib.get_close_matches(arg.split("=", 1)[0], list(self.__dict__.get("_flags", {})), n=1, cutoff=0.75)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""

    def is_secret_flag(self, option: str) -> bool | None:
        """Whether the flag ``option`` resolves to (``--api_key``, ``--api_key=X``) holds a secret, by its
        action's names; None when this parser has no such flag (the caller then judges by the text)."""
        from k9bench.redact import is_secret_name

        action = self.__dict__.get("_flags", {}).get(option.split("=", 1)[0])
        if action is None:
            return None
        return any(is_secret_name(name) for name in (*action.option_strings, action.dest))

    def error(self, message: str):  # noqa: D102 (argparse's): a bad value's message masks secrets too
        from k9bench.redact import redact_text

        super().error(redact_text(message))
