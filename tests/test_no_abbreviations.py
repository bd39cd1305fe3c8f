"""Issue 40 item 5: no parser of the project takes a long option by a prefix (``--max_new_token 24`` is not
``--max_new_tokens 24``): every parser is the project's one :class:`k9bench.cli.ArgumentParser`, which sets
``allow_abbrev=False``; and the redactor masks a value by the flag the parser resolved, not by a word in the
text typed."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from k9bench.cli import ArgumentParser
from k9bench.redact import MASK, redact_argv
from tests.test_docs import _load_file, _parser_of_main

REPO = Path(__file__).resolve().parent.parent
FRONT_ENDS = sorted(
    [p for p in REPO.glob("*.py")] + sorted((REPO / "bench").glob("*.py"))
    + [p for p in sorted((REPO / "k9bench").rglob("*.py")) if re.search(r"^def (main|build_parser)\(", p.read_text(), re.M)]
)
"""Every file that builds a parser: the root scripts, the bench scripts, the package's ``python -m`` tools."""


def test_no_code_builds_argparse_s_own_parser():
    """One parser class for the whole project: ``argparse.ArgumentParser(`` appears only in k9bench/cli.py
    (the tests' own fakes aside)."""
    sources = [*REPO.glob("*.py"), *(REPO / "bench").glob("*.py"), *(REPO / "k9bench").rglob("*.py")]
    offenders = [p.relative_to(REPO).as_posix() for p in sources
                 if "argparse.ArgumentParser(" in p.read_text() and p != REPO / "k9bench" / "cli.py"]
    assert offenders == []


def _parsers(path: Path) -> list[argparse.ArgumentParser]:
    if path.parent == REPO / "k9bench" or REPO / "k9bench" in path.parents:
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name)
    else:
        module = _load_file(path)
    if not hasattr(module, "build_parser") and not hasattr(module, "main"):
        return []
    if module.__name__ == "k9bench.inference.settings":  # its main() prints the settings' docs; it parses nothing
        return []
    builder = getattr(module, "build_parser", None)
    if builder is not None and builder.__code__.co_argcount == 0:
        parser = builder()
    elif builder is not None:  # pipeline.scripts.build_parser(script): the stage modules' own, walked there
        return []
    else:
        parser = _parser_of_main(module.main)
    found, todo = [], [parser]
    while todo:
        current = todo.pop()
        found.append(current)
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo.extend(action.choices.values())
    return found


@pytest.mark.parametrize("path", FRONT_ENDS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_parser_refuses_an_abbreviated_long_option(path):
    for parser in _parsers(path):
        assert isinstance(parser, ArgumentParser), f"{path.name}: {parser.prog} is not k9bench.cli.ArgumentParser"
        assert parser.allow_abbrev is False, f"{path.name}: {parser.prog} takes abbreviated flags"
        longs = [o for a in parser._actions for o in a.option_strings if o.startswith("--") and len(o) > 4]
        for option in longs:
            prefix = option[:-1]
            if any(o.startswith(prefix) and o != option for o in longs) or prefix in longs:
                continue  # the prefix is (the start of) another flag too
            with pytest.raises(SystemExit):
                parser.parse_args([prefix, "1"])


def test_an_abbreviated_flag_of_the_inference_script_is_refused_naming_the_flag_it_resembles(capsys):
    """As the new user met it: ``--max_new_token 24`` was taken for ``--max_new_tokens`` and shown masked."""
    import eval_video_llm

    with pytest.raises(SystemExit) as exc:
        eval_video_llm.build_parser().parse_args(["--max_new_token", "24"])
    assert exc.value.code == 2
    assert "did you mean --max_new_tokens?" in capsys.readouterr().err


def test_the_launcher_refuses_an_abbreviated_dry_run(capsys):
    from k9bench.pipeline.run import main

    assert main(["--dry"]) == 2
    assert "got '--dry'" in capsys.readouterr().out


def test_the_redactor_masks_by_the_flag_the_parser_resolved():
    import subjective_evals

    judge = subjective_evals.build_parser()
    assert redact_argv(["--max_new_tokens", "24"]) == ["--max_new_tokens", "24"]
    assert redact_argv(["--max_tokens", "24"], judge) == ["--max_tokens", "24"]
    assert redact_argv(["--api_key", "sk-abcdef123"], judge) == ["--api_key", MASK]
    assert redact_argv(["--api_key=sk-abcdef123"], judge) == [f"--api_key={MASK}"]
    # a flag the parser does not know is judged by its words: a value that may be a secret stays hidden
    assert redact_argv(["--hf_token", "hf_abcdef123"], judge) == ["--hf_token", MASK]
