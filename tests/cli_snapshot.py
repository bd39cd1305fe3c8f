"""Every flag of every command-line entry point, with its default: a snapshot that
tests/test_cli_snapshot.py compares against tests/data/cli_snapshot.json (taken before the
typed-settings change, so flags and defaults stay as users know them).

Regenerate only on a deliberate CLI change: ``python tests/cli_snapshot.py --write``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = Path(__file__).resolve().parent / "data" / "cli_snapshot.json"
ENTRY_POINTS = (
    "download_videos",
    "eval_video_llm",
    "evaluate_results",
    "subjective_evals",
    "k9bench.merge",
)


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


def describe(parser: argparse.ArgumentParser) -> dict:
    flags = {}
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        flags[" ".join(sorted(action.option_strings))] = {
            "dest": action.dest,
            "default": _jsonable(action.default),
            "choices": _jsonable(list(action.choices)) if action.choices is not None else None,
            "nargs": _jsonable(action.nargs),
            "const": _jsonable(action.const),
            "takes_value": action.nargs != 0,
        }
    return flags


def snapshot() -> dict:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return {name: describe(importlib.import_module(name).build_parser()) for name in ENTRY_POINTS}


if __name__ == "__main__":
    if "--write" in sys.argv:
        SNAPSHOT.write_text(json.dumps(snapshot(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {SNAPSHOT}")
    else:
        print(json.dumps(snapshot(), indent=1, sort_keys=True))
