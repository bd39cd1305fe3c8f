"""k9bench.pipeline.env: the launcher's variables, their defaults (the scripts' own flags'), their checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from k9bench.pipeline.env import VARIABLES, LaunchError, read_settings
from k9bench.pipeline.plan import build_steps
from k9bench.pipeline.stages import ShardMode
from tests.pipeline_fakes import fake, launcher_env  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parent.parent


def settings(tmp_path, **env):
    return read_settings({"OUT_DIR": str(tmp_path / "out"), "VIDEO_DIR": str(tmp_path / "v"), **env}, REPO)


def test_defaults_come_from_the_scripts_flags(tmp_path):
    import eval_video_llm
    import evaluate_results
    import subjective_evals

    s = settings(tmp_path)
    infer, score, judge = eval_video_llm.build_parser(), evaluate_results.build_parser(), subjective_evals.build_parser()
    assert s["MODEL_NAME"] == infer.get_default("model_name_or_path")
    assert s["MAX_FRAMES"] == str(infer.get_default("max_frames"))
    assert s["THRESHOLD"] == str(score.get_default("threshold"))
    assert s["EMBEDDING_MODEL"] == score.get_default("embedding_model")
    assert s["JUDGE_MODEL"] == judge.get_default("judge_model")
    assert s["DTYPE"] == "" and s["JUDGE_BASE_URL"] == ""  # the flag is not passed: the script decides
    assert s["MAX_SAMPLES"] == "10" and s["PUBLISHED"] == "matching" and s["REPORT"] == "1"  # the launcher's own
    assert read_settings({"VIDEO_DIR": str(tmp_path / "v")}, REPO)["OUT_DIR"] == "eval_results"
    assert not (tmp_path / "out").exists(), "reading the settings writes nothing"
    given = settings(tmp_path, MAX_FRAMES="8", THRESHOLD="0.3", DATASET_NAME="demo")
    assert (given["MAX_FRAMES"], given["THRESHOLD"], given.demo_questions) == ("8", "0.3", 12)


def test_documented_variables_keep_their_names():
    names = {v.name for v in VARIABLES}
    assert names >= {"MODEL_NAME", "MAX_FRAMES", "MAX_SAMPLES", "VIDEO_DIR", "OUT_DIR", "DATASET_NAME", "SPLIT", "BATCH_SIZE", "DTYPE",
                     "ATTN_IMPL", "THINKING_MODE", "AUDIO", "EMBEDDING_MODEL", "EMBED_BATCH_SIZE", "DEVICE", "THRESHOLD",
                     "JUDGE_MODEL", "JUDGE_BASE_URL", "DOWNLOAD_STRICT", "REPORT", "PUBLISHED", "K9_FINALIZE", "SERVE", "SERVE_URL",
                     "TENSOR_PARALLEL", "GPUS", "GPUS_PER_NODE"}


def test_demo_defaults_and_its_model_folder_need_not_exist_yet(tmp_path):
    s = read_settings({"DEMO": "1", "OUT_DIR": str(tmp_path / "d")}, REPO)
    assert s.demo and s.demo_build_model and s["MODEL_NAME"] == str(tmp_path / "d" / "tiny-qwen3vl")
    assert (s["DATASET_NAME"], s["MAX_FRAMES"], s["MAX_SAMPLES"], s["DTYPE"], s["DEVICE"]) == ("demo", "4", "-1", "float32", "cpu")
    assert s["VIDEO_DIR"] == str(tmp_path / "d" / "videos") and s.extra["INFER_ARGS"] == ("--device", "cpu", "--max_new_tokens", "24", "--greedy")
    av = read_settings({"DEMO": "1", "AUDIO": "1", "OUT_DIR": str(tmp_path / "d")}, REPO)
    assert av.demo_family == "qwen2_5_omni" and av["VIDEO_DIR"].endswith("videos_av") and av["MODEL_NAME"].endswith("tiny-qwen2_5omni")
    with pytest.raises(LaunchError, match="no such folder"):
        settings(tmp_path, MODEL_NAME=str(tmp_path / "tiny-qwen3vl"))  # outside the demo it must exist
    assert settings(tmp_path, MODEL_NAME="org/model")["MODEL_NAME"] == "org/model"
    assert not read_settings({"DEMO": "1", "OUT_DIR": str(tmp_path / "d"), "MODEL_NAME": "org/m"}, REPO).demo_build_model


def test_cuda_device_is_refused_where_there_is_none(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(LaunchError, match=r"DEVICE=cuda:1: no CUDA device is available here"):
        settings(tmp_path, DEVICE="cuda:1")


def test_thinking_mode_auto_follows_the_model_name(tmp_path):
    assert settings(tmp_path, MODEL_NAME="Qwen/Qwen3-VL-4B-Thinking").thinking
    assert not settings(tmp_path).thinking
    assert settings(tmp_path, THINKING_MODE="1").thinking


def test_args_are_split_like_a_shell_would(tmp_path):
    s = settings(tmp_path, INFER_ARGS="--system_prompt_file 'my prompt.txt' --max_new_tokens 5")
    from k9bench.layout import RunLayout

    [step] = [st for st in build_steps(s, RunLayout(str(tmp_path / "out"), s["MODEL_NAME"], 32, 10), ShardMode()) if st.name == "inference"]
    argv = step.argv
    assert step.extra == ("--system_prompt_file", "my prompt.txt", "--max_new_tokens", "5")
    assert argv[-4:] == ["--system_prompt_file", "my prompt.txt", "--max_new_tokens", "5"]


def test_steps_of_each_mode(tmp_path):
    from k9bench.layout import RunLayout

    s = settings(tmp_path, OPENAI_API_KEY="sk-test-key-123456")
    layout = RunLayout(str(tmp_path / "out"), s["MODEL_NAME"], 32, 10)
    names = lambda mode: [step.name for step in build_steps(s, layout, mode)]  # noqa: E731
    assert names(ShardMode()) == ["download", "inference", "calculate", "evaluate", "judge", "report"]
    assert names(ShardMode(num_shards=2)) == ["download", "inference-shard0", "inference-shard1", "merge", "calculate", "evaluate",
                                              "judge", "report"]
    assert names(ShardMode(num_shards=2, shard_id=1)) == ["download", "inference-shard1"]
    assert names(ShardMode(num_shards=2, finalize=True)) == ["merge", "calculate", "evaluate", "judge", "report"]


@pytest.mark.parametrize("name, value, resembles", [
    ("MAX_FRAME", "64", "MAX_FRAMES"),
    ("MODEL", "Qwen/Qwen3-VL-8B-Instruct", "MODEL_NAME"),
    ("OUTDIR", "elsewhere", "OUT_DIR"),
    ("EMBEDING_MODEL", "x/y", "EMBEDDING_MODEL"),
    ("K9_FINALISE", "1", "K9_FINALIZE"),
])
def test_a_variable_that_looks_like_the_launcher_s_is_warned_about_before_anything_runs(fake, launcher_env, capsys, monkeypatch,
                                                                                        name, value, resembles):
    """Issue 40 item 6: MAX_FRAME=64 and MODEL=... ran with the defaults without a word; now a warning names the
    variable they resemble, before the configuration (and the plan of --dry_run) is printed."""
    from k9bench.pipeline import main

    launcher_env()
    monkeypatch.setenv(name, value)
    assert main(["--dry_run"]) == 0
    out = capsys.readouterr().out
    warning = f"WARNING: {name} is not a launcher variable and is ignored; did you mean {resembles}?"
    assert warning in out
    assert out.index(warning) < min(i for i in (out.find("config"), out.find("plan"), out.find("step ")) if i >= 0)


def test_an_unknown_variable_under_the_launcher_s_prefix_is_warned_about_and_the_usual_ones_are_not():
    from k9bench.pipeline.env import lookalikes

    assert lookalikes({"K9BENCH_FOO": "1"}) == [
        "K9BENCH_FOO is not a variable the launcher or the package reads and is ignored (run_eval.sh --help lists them)"]
    ordinary = {"PATH": "/bin", "HOME": "/root", "PWD": "/", "SHELL": "/bin/bash", "TERM": "xterm", "LANG": "C", "USER": "me",
                "PYTHONPATH": ".", "VIRTUAL_ENV": "/v", "SLURM_JOB_ID": "7", "CUDA_HOME": "/usr/local/cuda", "TMPDIR": "/tmp",
                "HF_HUB_OFFLINE": "1", "HOSTNAME": "node1", "MAX_FRAMES": "8", "MODEL_NAME": "m", "OPENAI_BASE_URL": "http://x",
                "K9BENCH_VLLM_PYTHON": "/p", "K9BENCH_NO_PROGRESS": "1", "HF_TOKEN": "t", "DISPLAY": ":0", "EDITOR": "vi"}
    assert lookalikes(ordinary) == []
