"""The launcher builds each stage's settings from its step's values (by flag, typed where the launcher decides
them) and the user's ``*_ARGS``, through the stage's own parser (``ArgumentParser.parse_values``); the step's argv
is only the record of how to run it by hand, and that record gives the same settings."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from k9bench.cli import ArgumentParser
from k9bench.layout import RunLayout
from k9bench.pipeline import registry
from k9bench.pipeline.env import read_settings
from k9bench.pipeline.plan import build_steps
from k9bench.pipeline.stages import ShardMode
from tests.pipeline_fakes import REPO


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="toy")
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--files", nargs="+", required=True)
    parser.add_argument("--kind", choices=("a", "b"), default="a")
    parser.add_argument("--flag", action="store_true")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sample", dest="sample", action="store_true", default=None)
    group.add_argument("--greedy", dest="sample", action="store_false")
    return parser


def test_values_stand_where_defaults_would_and_args_still_win():
    parser = _parser()
    ns = parser.parse_values({"--n": "3", "--files": [Path("x.json")], "--flag": True, "--greedy": True})
    assert (ns.n, ns.files, ns.flag, ns.sample, ns.kind) == (3, ["x.json"], True, False, "a")  # texts typed, a path its text
    ns = parser.parse_values({"--n": 3, "--files": ["x"], "--flag": False}, ["--n", "5", "--sample"])
    assert (ns.n, ns.flag, ns.sample) == (5, False, True)
    assert parser.flag("--files").required  # required again after the call


@pytest.mark.parametrize(("values", "message"), [({"--files": ["x"], "--n": "many"}, "argument --n: invalid value: 'many'"),
                                                 ({"--files": ["x"], "--kind": "c"}, "argument --kind: invalid choice: 'c'"),
                                                 ({"--files": ["x"], "--nope": 1}, "unrecognized arguments: --nope"),
                                                 ({}, "the following arguments are required: --files")])
def test_a_bad_value_is_argparse_s_own_one_line_error(values, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_values(values)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def _plan(tmp_path, **env) -> list:
    model = tmp_path / "models" / "tiny-m"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    embed = tmp_path / "models" / "embed"
    embed.mkdir(exist_ok=True)
    base = {"MODEL_NAME": str(model), "DATASET_NAME": "demo", "MAX_SAMPLES": "-1", "MAX_FRAMES": "4", "DEVICE": "cpu",
            "VIDEO_DIR": str(tmp_path / "videos"), "OUT_DIR": str(tmp_path / "out"), "EMBEDDING_MODEL": str(embed)}
    s = read_settings({**base, **env}, REPO)
    layout = RunLayout(s["OUT_DIR"], s["MODEL_NAME"], int(s["MAX_FRAMES"]), int(s["MAX_SAMPLES"]))
    shards = int(env.get("NUM_SHARDS", "1"))
    return build_steps(s, layout, ShardMode(num_shards=shards))


def _settings_of(stage) -> object:
    """The frozen settings object a stage was built with."""
    for name in ("config", "settings", "run"):
        if dataclasses.is_dataclass(getattr(stage, name, None)):
            return getattr(stage, name)
    raise AssertionError(f"{type(stage).__name__} keeps no settings object")


def _by_hand(step):
    """The stage's settings as the script would build them from the step's recorded command line."""
    import importlib

    e = registry.entry(step.name)
    module = importlib.import_module({"report": "k9bench.report.stage"}.get(e.name, e.module))
    return module.config_from_argv(list(step.argv))


@pytest.mark.parametrize("env", [
    {},
    {"OPENAI_API_KEY": "sk-test-key-123456", "JUDGE_ARGS": "--max_retries 2", "SCORE_ARGS": "--batch_size 4",
     "INFER_ARGS": "--max_new_tokens 5 --greedy", "THRESHOLD": "0.7", "SPLIT": "test", "BATCH_SIZE": "2"},
    {"SERVE_URL": "http://127.0.0.1:9/v1", "THINKING_MODE": "1", "NUM_SHARDS": "2"},
    {"BACKEND": "vllm", "TENSOR_PARALLEL": "2", "DTYPE": "bfloat16", "PUBLISHED": "all"},
], ids=["defaults", "judge-and-args", "served-sharded", "vllm"])
def test_each_stage_s_settings_equal_those_of_its_recorded_command_line(tmp_path, env, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = _plan(tmp_path, **env)
    parsed = [s for s in steps if registry.entry(s.name).name not in ("merge",)]
    assert {registry.entry(s.name).name for s in parsed} >= {"download", "inference", "calculate", "evaluate", "report"}
    for step in parsed:
        built = _settings_of(registry.make_stage(step))
        by_hand = _by_hand(step)
        if hasattr(by_hand, "argv"):  # the record of the command line itself: the step's
            assert tuple(by_hand.argv) == tuple(step.argv), step.name
        assert built == by_hand, step.name


def test_a_launcher_value_is_typed_by_its_stage_s_flag_and_args_win_over_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    steps = {s.name: s for s in _plan(tmp_path, MAX_FRAMES="8", INFER_ARGS="--max_frames 2", EMBED_BATCH_SIZE="16")}
    inference = _settings_of(registry.make_stage(steps["inference"]))
    assert steps["inference"].values["--max_frames"] == "8" and inference.frames.max_frames == 2  # INFER_ARGS win
    calculate = _settings_of(registry.make_stage(steps["calculate"]))
    assert calculate.embedding.batch_size == 16 and isinstance(calculate.embedding.batch_size, int)
    assert isinstance(steps["calculate"].values["--output_file"], Path)
    assert calculate.files.output_file == str(steps["calculate"].values["--output_file"])
    assert os.fspath(steps["inference"].values["--output_file"]) == inference.output.output_file
