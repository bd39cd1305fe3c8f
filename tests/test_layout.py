"""k9bench.layout: every artifact name, and ``python -m k9bench.layout`` printing a run's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from k9bench.layout import (
    RunLayout,
    artifact_name,
    checkpoint_path,
    next_stage_path,
    parse_artifact_name,
    run_tag,
    shard_path,
    short_model_name,
    skipped_path,
)

REPO = Path(__file__).resolve().parent.parent


def parse_lines(text: str) -> dict:
    """``role  path`` lines as printed by ``python -m k9bench.layout``."""
    return {line.split(None, 1)[0]: line.split(None, 1)[1] for line in text.splitlines()}


def test_names():
    assert short_model_name("Qwen/Qwen3-VL-4B-Instruct") == "Qwen3-VL-4B-Instruct"
    assert short_model_name("/models/tiny-qwen3vl/") == "tiny-qwen3vl"
    assert run_tag("Qwen/Qwen3-VL-4B-Instruct", 32, -1) == "Qwen3-VL-4B-Instruct_mf32_n-1"
    assert artifact_name("sim", "a/b", 4, 10) == "sim_b_mf4_n10.json"
    with pytest.raises(ValueError, match="unknown stage"):
        artifact_name("report", "a/b", 4, 10)
    assert shard_path("o/raw_x.json", 4, 2) == Path("o/raw_x.shard2of4.json")
    assert shard_path("o/raw_x.json", 1, 0) == Path("o/raw_x.json")
    assert next_stage_path("o/raw_x.json", "sim") == Path("o/sim_x.json")
    assert next_stage_path("o/eval_x.json", "judge") == Path("o/judge_x.json")
    assert next_stage_path("o/mine.json", "eval") == Path("o/mine_eval.json")
    assert skipped_path("o/judge_x.json") == Path("o/judge_x_skipped.json")
    assert checkpoint_path("o/raw_x.json") == Path("o/raw_x.json.partial.jsonl")


def test_parse_artifact_name_round_trips_and_refuses_other_names():
    name = parse_artifact_name(artifact_name("eval", "Qwen/Qwen3-VL-8B_mf_test", 64, -1))
    assert (name.stage, name.model, name.max_frames, name.max_samples) == ("eval", "Qwen3-VL-8B_mf_test", 64, -1)
    shard = parse_artifact_name("out/raw_m_mf4_n-1.shard0of2.json")
    assert (shard.stage, shard.model, shard.max_frames) == ("raw", "m", 4)
    assert parse_artifact_name("judge_m_mf4_n10_skipped.json").model == "m"
    for other in ("report.json", "eval_m.json", "eval_m_mf4_n10x.json", "mine_eval.json"):
        assert parse_artifact_name(other) is None, other


def test_layout_cli_prints_the_run_paths(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "k9bench.layout", "--out_dir", str(tmp_path / "o d"), "--model", "org/My Model",
                           "--max_frames", "8", "--max_samples", "-1", "--num_shards", "3"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = parse_lines(proc.stdout)
    out = tmp_path / "o d"
    assert got == {k: str(v) for k, v in RunLayout(str(out), "org/My Model", 8, -1).paths(3).items()}
    assert got["raw"] == str(out / "raw_My Model_mf8_n-1.json")
    assert got["judge_skipped"] == str(out / "judge_My Model_mf8_n-1_skipped.json")
    assert got["report"] == str(out / "report_My Model_mf8_n-1")
    assert got["shards"].replace("{i}", "1") == str(shard_path(got["raw"], 3, 1))


@pytest.mark.parametrize("args, message", [(["--num_shards", "0"], "--num_shards"), (["--model", ""], "--model is empty")])
def test_layout_cli_refuses_nonsense(args, message):
    base = {"--model": "a/b", "--max_frames": "4", "--max_samples": "10"}
    argv = [x for k, v in base.items() if k not in args for x in (k, v)] + args
    proc = subprocess.run([sys.executable, "-m", "k9bench.layout", *argv], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_audio_runs_have_their_own_names(tmp_path):
    assert run_tag("Qwen/Qwen2.5-Omni-3B", 32, 10, audio=True) == "Qwen2.5-Omni-3B_mf32_n10_av"
    assert run_tag("Qwen/Qwen2.5-Omni-3B", 32, 10, audio=False) == "Qwen2.5-Omni-3B_mf32_n10"
    assert artifact_name("raw", "a/b", 4, 10, audio=True) == "raw_b_mf4_n10_av.json"
    video, both = RunLayout(str(tmp_path), "a/b", 4, 10), RunLayout(str(tmp_path), "a/b", 4, 10, audio=True)
    video_files, both_files = set(video.paths(2).values()), set(both.paths(2).values())
    assert both.paths()["raw"] == tmp_path / "raw_b_mf4_n10_av.json"
    assert both.paths()["judge_skipped"] == tmp_path / "judge_b_mf4_n10_av_skipped.json"
    assert both.paths(2)["shards"] == tmp_path / "raw_b_mf4_n10_av.shard{i}of2.json"
    assert not video_files & both_files  # no file is shared
    for stage in ("raw", "eval", "judge"):
        name = parse_artifact_name(both.path(stage))
        assert (name.stage, name.model, name.max_frames, name.max_samples, name.audio) == (stage, "b", 4, 10, True)
        assert parse_artifact_name(video.path(stage)).audio is False
    assert parse_artifact_name("raw_b_mf4_n10_av.shard0of2.json").audio is True
    assert parse_artifact_name("judge_b_mf4_n10_av_skipped.json").model == "b"
    proc = subprocess.run([sys.executable, "-m", "k9bench.layout", "--out_dir", str(tmp_path), "--model", "a/b",
                           "--max_frames", "4", "--max_samples", "10", "--audio"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert parse_lines(proc.stdout) == {k: str(v) for k, v in both.paths().items() if k != "shards"}
