"""The launcher refuses every bad environment value and unusable output folder before anything runs
(issue 15 item 8, issue 23): exit 2, one line naming the variable, no traceback, nothing written, no
stage started. In process (``k9bench.pipeline.main``); one case through the bash wrapper as well."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k9bench.pipeline import main
from tests.pipeline_fakes import LAUNCHER_VARS, REPO
from tests.test_hub_offline import answering_server  # noqa: F401 (a fixture: a loopback Hub that answers)

READ_ONLY = "/sys/k9bench_out"
"""A folder no one can create, root included (sysfs)."""


@pytest.fixture
def env(monkeypatch, tmp_path):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("K9BENCH_DIR", str(REPO))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)

    def apply(**values: str) -> None:
        for key, value in values.items():
            monkeypatch.setenv(key, value)
    return apply


CASES = [
    ({"THRESHOLD": "5"}, "THRESHOLD must be a number in [0, 1], got '5'"),
    ({"THRESHOLD": "-1"}, "THRESHOLD must be a number in [0, 1], got '-1'"),
    ({"THRESHOLD": "nan"}, "THRESHOLD must be a finite number, got 'nan'"),
    ({"DEVICE": "gpu"}, "DEVICE must be auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    ({"MAX_FRAMES": "1"}, "MAX_FRAMES must be 0 (text only) or at least 2"),
    ({"MAX_FRAMES": "-4"}, "MAX_FRAMES must be "),  # the flag's own type or the launcher's rule, whichever speaks first
    ({"MAX_FRAMES": "many"}, "MAX_FRAMES must be an integer"),
    ({"MAX_SAMPLES": "0"}, "MAX_SAMPLES must be -1 (all questions) or a positive integer, got '0'"),
    ({"MAX_SAMPLES": "ten"}, "MAX_SAMPLES must be an integer, got 'ten'"),
    ({"BATCH_SIZE": "0"}, "BATCH_SIZE must be an integer >= 1, got '0'"),
    ({"BATCH_SIZE": "many"}, "BATCH_SIZE must be an integer >= 1 or auto, got 'many'"),
    ({"EMBED_BATCH_SIZE": "-2"}, "EMBED_BATCH_SIZE must be an integer >= 1, got '-2'"),
    ({"DTYPE": "fp8"}, "DTYPE must be one of"),
    ({"ATTN_IMPL": "fast"}, "ATTN_IMPL must be one of"),
    ({"JUDGE_BASE_URL": "localhost:8000/v1"}, "JUDGE_BASE_URL must be an http:// or https:// URL"),
    ({"SERVE_URL": "localhost:8000"}, "SERVE_URL must be an http:// or https:// URL"),
    ({"SERVE": "sglang"}, "SERVE must be vllm (or unset), got 'sglang'"),
    ({"GPUS_PER_NODE": "two"}, "GPUS_PER_NODE must be an integer, got 'two'"),
    ({"PUBLISHED": "some"}, "PUBLISHED must be none, matching or all, got 'some'"),
    ({"DOWNLOAD_STRICT": "yes"}, "DOWNLOAD_STRICT must be 0 or 1, got 'yes'"),
    ({"THINKING_MODE": "maybe"}, "THINKING_MODE must be auto, 0 or 1, got 'maybe'"),
    ({"AUDIO": "2"}, "AUDIO must be 0 or 1, got '2'"),
    ({"AUDIO": "yes", "DEMO": "1"}, "AUDIO must be 0 or 1, got 'yes'"),
    ({"DEMO": "2"}, "DEMO must be 0 or 1, got '2'"),
    ({"OUT_DIR": "/etc/passwd/x"}, "OUT_DIR=/etc/passwd/x cannot be created: /etc/passwd is not a folder"),
    ({"OUT_DIR": READ_ONLY}, f"OUT_DIR={READ_ONLY} is not writable"),
    ({"OUT_DIR": READ_ONLY, "DEMO": "1"}, f"OUT_DIR={READ_ONLY} is not writable"),
    ({"VIDEO_DIR": "/etc/passwd/videos"}, "VIDEO_DIR=/etc/passwd/videos cannot be created"),
    ({"MODEL_NAME": "./nomodel"}, "MODEL_NAME=./nomodel: no such folder"),
    ({"MODEL_NAME": "no/such/folder"}, "MODEL_NAME=no/such/folder: no such folder"),
    ({"EMBEDDING_MODEL": "./no-embedder"}, "EMBEDDING_MODEL=./no-embedder: no such folder"),
    ({"INFER_ARGS": "--max_new_tokens -3"}, "INFER_ARGS: eval_video_llm.py: error: argument --max_new_tokens"),
    ({"SCORE_ARGS": "--batch_size x"}, "SCORE_ARGS: "),
]


def ids(case) -> str:
    return ",".join(f"{k}={v}" for k, v in case[0].items())


@pytest.mark.parametrize("overrides, message", CASES, ids=[ids(c) for c in CASES])
def test_bad_value_stops_the_launcher_before_anything_runs(env, tmp_path, capsys, overrides, message):
    if READ_ONLY in overrides.values() and os.access("/sys", os.W_OK) and os.geteuid() != 0:
        pytest.skip("/sys is writable here")
    values = {"OUT_DIR": str(tmp_path / "out"), "VIDEO_DIR": str(tmp_path / "videos"), **overrides}
    if overrides.get("DEMO") == "1":
        values.pop("VIDEO_DIR")  # the demo's own default: OUT_DIR/videos
    env(**values)
    started = time.monotonic()
    code = main([])
    elapsed = time.monotonic() - started
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 2, text
    errors = [ln for ln in text.splitlines() if "ERROR" in ln]
    assert len(errors) == 1, text
    assert message in errors[0]
    assert "Traceback" not in text and "step " not in text
    assert not (tmp_path / "out").exists() and not (tmp_path / "videos").exists(), "something was written"
    assert not list((tmp_path / "cwd").iterdir()), "something was written in the working folder"
    assert elapsed < 30, f"the check took {elapsed:.1f} s"


def test_read_only_existing_out_dir_with_earlier_results_is_left_unchanged(env, tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes into a chmod 555 folder; the /sys cases above cover read-only folders for root")
    out = tmp_path / "out"
    out.mkdir()
    earlier = out / "eval_x_mf32_n10.json"
    earlier.write_text("{}")
    out.chmod(0o555)
    try:
        env(OUT_DIR=str(out), VIDEO_DIR=str(tmp_path / "v"))
        code = main([])
    finally:
        out.chmod(0o755)
    assert code == 2 and f"OUT_DIR={out} is not writable" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [earlier.name] and earlier.read_text() == "{}"


def test_batch_size_auto_and_audio_pass_the_preflight(env, tmp_path, capsys, monkeypatch, answering_server):
    # online for this check (nothing is fetched by a dry run): offline, the preflight refuses the uncached Hub defaults;
    # the Hub is a loopback server that answers (the preflight probes it since issue 40 item 3)
    from k9bench.models import hub

    monkeypatch.setattr(hub, "_probe_results", {})
    offline = {var: "0" for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
    env(OUT_DIR=str(tmp_path / "out"), VIDEO_DIR=str(tmp_path / "v"), BATCH_SIZE="auto", AUDIO="1", HF_ENDPOINT=answering_server,
        **offline)
    assert main(["--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "BATCH_SIZE       auto" in out
    assert "raw_Qwen3-VL-4B-Instruct_mf32_n10_av.json" in out  # AUDIO=1 names the artifacts _av


def test_bad_value_through_the_bash_wrapper(tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in LAUNCHER_VARS and k != "K9BENCH_DIR"}
    environ.update(PYTHON=sys.executable, THRESHOLD="5", OUT_DIR=str(tmp_path / "out"))
    proc = subprocess.run(["bash", str(REPO / "run_eval.sh")], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "ERROR: THRESHOLD must be a number in [0, 1], got '5'" in proc.stdout and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
