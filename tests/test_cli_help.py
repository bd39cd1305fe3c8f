"""Every root script's ``--help`` gives each flag's default where there is one to give (a new user reads the
defaults there first), and never ``(default: None)``."""

from __future__ import annotations

import importlib

import pytest

SCRIPTS = ("download_videos", "eval_video_llm", "evaluate_results", "subjective_evals")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_names_every_default_that_says_something(script):
    parser = importlib.import_module(script).build_parser()
    text = " ".join(parser.format_help().split())
    assert "(default: None)" not in text
    silent = []
    for action in parser._actions:  # argparse has no public list of a parser's actions
        value = action.default
        if not action.option_strings or action.help is None or action.option_strings[-1] == "--verbose":
            continue
        if value is None or isinstance(value, bool) or value in ([], ()) or value == "==SUPPRESS==":
            continue
        if "default" not in action.help and not (parser.formatter_class.__name__ == "DefaultsHelpFormatter"):
            silent.append(f"{action.option_strings[-1]} (default {value!r})")
    assert silent == [], silent
