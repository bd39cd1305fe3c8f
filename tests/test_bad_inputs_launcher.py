"""run_eval.sh refuses every bad environment value and unusable output folder before anything runs
(issue 15, item 8 and the launcher part of item 1): exit 2, one line naming the variable, no
traceback, nothing written, no step started."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "run_eval.sh"
LAUNCHER_VARS = ("OPENAI_API_KEY", "JUDGE_BASE_URL", "JUDGE_MODEL", "MODEL_NAME", "MAX_FRAMES", "MAX_SAMPLES", "VIDEO_DIR", "OUT_DIR",
                 "DATASET_NAME", "SPLIT", "NUM_SHARDS", "SHARD_ID", "DEMO", "VENV", "K9BENCH_DIR", "INFER_ARGS", "THRESHOLD",
                 "DEVICE", "DTYPE", "ATTN_IMPL", "BATCH_SIZE", "EMBED_BATCH_SIZE", "EMBEDDING_MODEL")
READ_ONLY = "/sys/k9bench_out"
"""A folder no one can create, root included (sysfs)."""


def launcher_env(**overrides: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in LAUNCHER_VARS}
    env.update(K9BENCH_NO_PROGRESS="1", PYTHON=sys.executable)
    env.update(overrides)
    return env


CASES = [
    ({"THRESHOLD": "5"}, "THRESHOLD must be a number in [0, 1], got '5'"),
    ({"THRESHOLD": "-1"}, "THRESHOLD must be a number in [0, 1], got '-1'"),
    ({"THRESHOLD": "nan"}, "THRESHOLD must be a finite number, got 'nan'"),
    ({"DEVICE": "gpu"}, "DEVICE must be auto, cpu, mps, cuda or cuda:N, got 'gpu'"),
    ({"MAX_FRAMES": "1"}, "MAX_FRAMES must be 0 (text only) or at least 2"),
    ({"MAX_FRAMES": "-4"}, "MAX_FRAMES must be "),  # the flag's own type or the launcher's rule, whichever speaks first
    ({"MAX_SAMPLES": "0"}, "MAX_SAMPLES must be -1 (all questions) or a positive integer, got '0'"),
    ({"MAX_SAMPLES": "ten"}, "MAX_SAMPLES must be an integer, got 'ten'"),
    ({"BATCH_SIZE": "0"}, "BATCH_SIZE must be an integer >= 1, got '0'"),
    ({"EMBED_BATCH_SIZE": "-2"}, "EMBED_BATCH_SIZE must be an integer >= 1, got '-2'"),
    ({"DTYPE": "fp8"}, "DTYPE must be one of"),
    ({"ATTN_IMPL": "fast"}, "ATTN_IMPL must be one of"),
    ({"JUDGE_BASE_URL": "localhost:8000/v1"}, "JUDGE_BASE_URL must be an http:// or https:// URL"),
    ({"OUT_DIR": "/etc/passwd/x"}, "OUT_DIR=/etc/passwd/x cannot be created: /etc/passwd is not a folder"),
    ({"OUT_DIR": READ_ONLY}, f"OUT_DIR={READ_ONLY} is not writable"),
    ({"OUT_DIR": READ_ONLY, "DEMO": "1"}, f"OUT_DIR={READ_ONLY} is not writable"),
    ({"VIDEO_DIR": "/etc/passwd/videos"}, "VIDEO_DIR=/etc/passwd/videos cannot be created"),
    ({"MODEL_NAME": "./nomodel"}, "MODEL_NAME=./nomodel: no such folder"),
]


@pytest.mark.parametrize("overrides, message", CASES, ids=[next(iter(c[0].items()))[0] + "=" + next(iter(c[0].values())) for c in CASES])
def test_bad_value_stops_the_launcher_before_anything_runs(tmp_path, overrides, message):
    if READ_ONLY in overrides.values() and os.access("/sys", os.W_OK) and os.geteuid() != 0:
        pytest.skip("/sys is writable here")
    env = launcher_env(**{"OUT_DIR": str(tmp_path / "out"), "VIDEO_DIR": str(tmp_path / "videos"), **overrides})
    if overrides.get("DEMO") == "1":
        env.pop("VIDEO_DIR")  # the demo's own default: OUT_DIR/videos
    work = tmp_path / "cwd"
    work.mkdir()
    started = time.monotonic()
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "ERROR" in ln]
    assert len(errors) == 1, proc.stdout + proc.stderr
    assert message in errors[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "step " not in proc.stdout, "a step started"
    assert not (tmp_path / "out").exists() and not (tmp_path / "videos").exists(), "something was written"
    assert not list(work.iterdir()), "something was written in the working folder"
    assert elapsed < 30, f"the check took {elapsed:.1f} s"


def test_read_only_existing_out_dir_with_earlier_results_is_left_unchanged(tmp_path):
    """A folder that exists but cannot be written: refused up front, its files untouched."""
    if os.geteuid() == 0:
        pytest.skip("root writes into a chmod 555 folder; the /sys cases above cover read-only folders for root")
    out = tmp_path / "out"
    out.mkdir()
    earlier = out / "eval_x_mf32_n10.json"
    earlier.write_text("{}")
    out.chmod(0o555)
    try:
        proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=launcher_env(OUT_DIR=str(out), VIDEO_DIR=str(tmp_path / "v")),
                              capture_output=True, text=True, timeout=120)
    finally:
        out.chmod(0o755)
    assert proc.returncode == 2
    assert f"OUT_DIR={out} is not writable" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == [earlier.name] and earlier.read_text() == "{}"


AUDIO_AND_BATCH_CASES = [
    ({"AUDIO": "2"}, "AUDIO must be 0 or 1, got '2'"),
    ({"AUDIO": "yes", "DEMO": "1"}, "AUDIO must be 0 or 1, got 'yes'"),
    ({"BATCH_SIZE": "many"}, "BATCH_SIZE must be an integer >= 1 or auto, got 'many'"),
]


@pytest.mark.parametrize("overrides, message", AUDIO_AND_BATCH_CASES, ids=[f"{k}={v}" for c in AUDIO_AND_BATCH_CASES for k, v in
                                                                           list(c[0].items())[:1]])
def test_bad_audio_or_batch_size_stops_the_launcher_before_anything_runs(tmp_path, overrides, message):
    test_bad_value_stops_the_launcher_before_anything_runs(tmp_path, overrides, message)


def test_batch_size_auto_passes_the_preflight(tmp_path):
    env = launcher_env(OUT_DIR=str(tmp_path / "out"), VIDEO_DIR=str(tmp_path / "v"), BATCH_SIZE="auto", AUDIO="1",
                       DATASET_NAME=str(tmp_path / "missing.jsonl"))
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "BATCH_SIZE       auto" in proc.stdout, proc.stdout + proc.stderr
    assert "raw_Qwen3-VL-4B-Instruct_mf32_n10_av.json" in proc.stdout  # AUDIO=1 names the artifacts _av
    assert "ERROR: step download failed" in proc.stdout  # got past the preflight
