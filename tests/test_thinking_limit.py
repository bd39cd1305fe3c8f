"""Thinking limits (issue 37 item 6): the scripts' and the launcher's thinking setting names both limits (the
reference scripts' 3,072, the paper's 2,048), the run records which one it used, and the report compares a
thinking run with Table 1 only at the paper's (tests/test_paper_rows.py shows the report's side)."""

from __future__ import annotations

from pathlib import Path

import pytest

import eval_video_llm
from k9bench.data.published import THINKING_LIMITS
from k9bench.inference.settings import config_from_namespace, resolve
from k9bench.layout import RunLayout
from k9bench.pipeline.env import read_settings
from k9bench.pipeline.plan import build_steps
from k9bench.pipeline.stages import ShardMode

REPO = Path(__file__).resolve().parent.parent


def generation(*argv: str):
    config = resolve(config_from_namespace(eval_video_llm.build_parser().parse_args(list(argv))))
    return config.generation, config.adjustments


@pytest.mark.parametrize(
    "argv, tokens, limit",
    [
        (["--thinking_mode"], 3072, "reference"),
        (["--thinking_mode", "--thinking_limit", "reference"], 3072, "reference"),
        (["--thinking_mode", "--thinking_limit", "paper"], 2048, "paper"),
        (["--thinking_mode", "--max_new_tokens", "2048"], 2048, "paper"),  # an explicit limit is named by its value
        (["--thinking_mode", "--thinking_limit", "paper", "--max_new_tokens", "4096"], 4096, "own"),
        ([], 2048, "reference"),  # no thinking: the limit setting is not used
    ],
)
def test_the_scripts_thinking_setting_names_both_limits_and_records_the_one_used(argv, tokens, limit):
    gen, adjustments = generation(*argv)
    assert (gen.max_new_tokens, gen.thinking_limit) == (tokens, limit)
    assert ("thinking_limit" in adjustments) == (limit == "own" or "--max_new_tokens" in argv and limit != "reference")
    assert THINKING_LIMITS == {"reference": 3072, "paper": 2048}
    help_text = " ".join(eval_video_llm.build_parser().format_help().split())
    assert "reference (3,072)" in help_text and "paper (2,048)" in help_text


def inference_argv(tmp_path: Path, **env: str) -> list[str]:
    s = read_settings({"OUT_DIR": str(tmp_path / "out"), "VIDEO_DIR": str(tmp_path / "v"), **env}, REPO)
    steps = build_steps(s, RunLayout(str(tmp_path / "out"), s["MODEL_NAME"], 32, 10), ShardMode())
    return next(step for step in steps if step.name == "inference").argv


def test_the_launcher_passes_the_limit_it_is_given(tmp_path):
    model = {"MODEL_NAME": "Qwen/Qwen3-VL-8B-Thinking"}
    argv = inference_argv(tmp_path, **model)
    assert "--thinking_mode" in argv and "--thinking_limit" not in argv  # the reference scripts' limit, eval_video_llm.py's default
    argv = inference_argv(tmp_path, THINKING_LIMIT="paper", **model)
    assert argv[argv.index("--thinking_limit") + 1] == "paper"
    assert "--thinking_limit" not in inference_argv(tmp_path, THINKING_LIMIT="paper")  # no thinking: no limit
    from k9bench.pipeline.env import LaunchError

    with pytest.raises(LaunchError, match="THINKING_LIMIT"):
        inference_argv(tmp_path, THINKING_LIMIT="2048")


def test_the_raw_file_records_the_limit(tmp_path, demo_video_dir, monkeypatch):
    """An end-to-end thinking run against the fake OpenAI server records thinking_mode, thinking_limit and max_new_tokens."""
    import json

    from tests.fake_openai_server import FakeOpenAIServer
    from tests.test_openai_backend_runs import openai_args, reply

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-thinking")
    out = tmp_path / "raw.json"
    with FakeOpenAIServer(reply) as server:
        argv = openai_args(server, out, demo_video_dir, "--max_frames", "2", "--max_samples", "1", "--thinking_mode", "--thinking_limit", "paper")
        assert eval_video_llm.main(argv) == 0
        assert server.chat_requests()[0].body["max_tokens"] == 2048
    block = json.loads(out.read_text())["inference"]
    assert (block["thinking_mode"], block["thinking_limit"], block["max_new_tokens"]) == (True, "paper", 2048)
