"""Issue 40 item 10: every numeric flag of download_videos.py, evaluate_results.py and subjective_evals.py, and
every numeric launcher variable, has its range checked where it is parsed: a value far below or far above it
(a sign or a few digits typed wrong), NaN or an infinity is refused in one line (exit 2) before any work.
eval_video_llm.py's flags are engine-hf's (tests/test_bad_inputs_infer.py)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io

import pytest

from k9bench.stage import StageError
from tests.pipeline_fakes import fake, launcher_env  # noqa: F401 (fixtures)

SCRIPTS = {
    "download_videos.py": ("k9bench.download.stage", []),
    "evaluate_results.py": ("k9bench.scoring.stages", ["--mode", "calculate", "--input_file", "x.json"]),
    "subjective_evals.py": ("k9bench.judge.settings", ["--evaluations", "x.json"]),
}
ALL_WHEN_LARGE = {"--max_samples", "--limit"}
"""Flags where a large number means "all of them": nothing above is refused."""
NOT_NUMERIC = ("str", "device_name", "http_url", "str2bool")


def numeric_flags() -> list[tuple[str, str]]:
    found = []
    for script, (module, _) in SCRIPTS.items():
        for action in importlib.import_module(module).build_parser()._actions:
            kind = getattr(action.type, "__name__", "")
            if action.option_strings and action.nargs != 0 and action.type is not None and kind not in NOT_NUMERIC:
                found.append((script, action.option_strings[-1]))
    return found


def refused(script: str, argv: list[str]) -> bool:
    module, base = SCRIPTS[script]
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            importlib.import_module(module).config_from_argv([*base, *argv])
    except SystemExit as exc:
        return exc.code == 2
    except StageError as exc:
        return exc.exit_code == 2
    return False


FLAGS = numeric_flags()


def test_the_walk_finds_the_numeric_flags():
    assert {("subjective_evals.py", "--concurrency"), ("download_videos.py", "--workers"),
            ("evaluate_results.py", "--threshold")} <= set(FLAGS)


@pytest.mark.parametrize("script, flag", FLAGS, ids=[f"{s} {f}" for s, f in FLAGS])
def test_a_numeric_flag_refuses_what_lies_far_outside_its_range(script, flag):
    values = ["-1000000000000", "nan", "inf"] + ([] if flag in ALL_WHEN_LARGE else ["1000000000000"])
    accepted = [v for v in values if not refused(script, [flag, v])]
    assert accepted == [], f"{script} {flag} accepts {accepted}"


LAUNCHER_NUMERIC = ["MAX_FRAMES", "BATCH_SIZE", "EMBED_BATCH_SIZE", "THRESHOLD", "TENSOR_PARALLEL", "GPUS", "GPUS_PER_NODE"]
INFERENCE_FLAGS_BOUND = {"MAX_FRAMES", "BATCH_SIZE"}
"""Their upper bound is eval_video_llm.py's flags' (engine-hf's part of issue 40): the launcher types them by those flags."""


@pytest.mark.parametrize("variable, value", [(v, x) for v in LAUNCHER_NUMERIC for x in ("-1000000000000", "1000000000000", "nan")
                                             if not (v in INFERENCE_FLAGS_BOUND and x == "1000000000000")])
def test_a_numeric_launcher_variable_refuses_what_lies_far_outside_its_range(fake, launcher_env, capsys, variable, value):
    from k9bench.pipeline import main

    launcher_env(**{variable: value})
    code = main(["--dry_run"])
    out = capsys.readouterr().out
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert code == 2 and len(errors) == 1 and f"{variable}" in errors[0], out
    assert "--" not in errors[0].split("ERROR: ", 1)[1], errors[0]  # the variable, not a flag the user never typed


def test_a_bound_keeps_the_lower_bound_s_own_message():
    from k9bench.validators import at_most, positive_int

    kind = at_most(positive_int, 10)
    with pytest.raises(argparse.ArgumentTypeError, match=">= 1"):
        kind("0")
    with pytest.raises(argparse.ArgumentTypeError, match="at most 10"):
        kind("11")
    assert kind("10") == 10
