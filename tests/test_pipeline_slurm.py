"""python -m k9bench.pipeline in process: SLURM arrays and the merge job, shards, requeue on USR1,
signals, GPUS/GPUS_PER_NODE, SERVE=vllm and SERVE_URL (stand-in stages: tests/pipeline_fakes.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path

import pytest

from k9bench.pipeline import run as pipeline_run
from tests.pipeline_fakes import TAG, fake, launcher_env, listener, option  # noqa: F401 (fixtures)
from tests.test_pipeline import ALL, launch


def stand_in(bindir: Path, name: str, calls: Path, reply: str = "") -> None:
    """A stand-in SLURM command that records its arguments (one per line, then ``--``) and prints ``reply``."""
    bindir.mkdir(exist_ok=True)
    path = bindir / name
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "{name}" "$@" "--" "ARRAY_ENV=${{SLURM_ARRAY_TASK_ID:-unset}}" >> {calls}\n'
                    f'echo "{reply}"\n')
    path.chmod(0o755)


@pytest.fixture
def slurm_bin(tmp_path, monkeypatch):
    calls = tmp_path / "slurm_calls"
    bindir = tmp_path / "bin"
    stand_in(bindir, "sbatch", calls, "4242")
    stand_in(bindir, "scontrol", calls)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return calls


ARRAY_TASK0 = {"SLURM_JOB_ID": "101", "SLURM_ARRAY_JOB_ID": "100", "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2",
               "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_MAX": "1", "SLURM_ARRAY_TASK_STEP": "1", "SLURM_JOB_NAME": "k9bench-eval"}


def test_array_task0_submits_one_merge_job_and_runs_its_shard(fake, launcher_env, slurm_bin, capsys, tmp_path):
    launcher_env(**ARRAY_TASK0)
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    assert ran == ["download", "inference"]
    assert option(fake.calls[1][1], "--shard_id") == "0" and option(fake.calls[1][1], "--num_shards") == "2"
    merge_log = tmp_path / "slurm_logs" / "k9bench-eval-merge-4242.out"
    assert f"step submit-finalize: job 4242 merges the 2 shards after array 100 succeeds, then scores; its log: {merge_log}" in out
    args = slurm_bin.read_text().splitlines()
    assert "--dependency=afterok:100" in args and "--kill-on-invalid-dep=yes" in args
    assert any(a.startswith("--export=ALL,K9_FINALIZE=1,NUM_SHARDS=2,SHARD_ID=,K9BENCH_DIR=") for a in args)
    assert "--output=slurm_logs/k9bench-eval-merge-%j.out" in args
    assert "ARRAY_ENV=unset" in args  # the task's own array variables do not leak into the merge job
    assert (tmp_path / "out" / ".finalize_100.jobid").read_text().strip() == "4242"
    assert "the merge job scores the run once every shard is done" in out
    # the requeued task 0 finds the marker and submits nothing
    launcher_env(**ARRAY_TASK0, SLURM_RESTART_COUNT="1")
    code, out, ran = launch(fake, capsys)
    assert code == 0 and "finalize job already submitted: 4242" in out and ran == []
    assert "requeued run (restart 1): resuming every stage" in out
    assert [a for a in slurm_bin.read_text().splitlines() if a == "sbatch"] == ["sbatch"]


def test_array_task1_runs_its_shard_and_the_merge_job_finalizes(fake, launcher_env, slurm_bin, capsys, tmp_path):
    launcher_env(**{**ARRAY_TASK0, "SLURM_JOB_ID": "102", "SLURM_ARRAY_TASK_ID": "1"})
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ["download", "inference"], out
    assert "submit-finalize" not in out and option(fake.calls[1][1], "--shard_id") == "1"
    launcher_env(**ARRAY_TASK0, K9_FINALIZE="1", NUM_SHARDS="2")  # what the merge job gets (its own array vars unset)
    for name in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        os.environ.pop(name)
    fake.codes["merge"] = 1  # what k9bench.merge does while shard 0 is missing
    code, out, ran = launch(fake, capsys)
    assert code == 1 and ran == ["merge"] and "ERROR: step merge failed (exit 1)" in out
    assert "step inference" not in out and "step download" not in out
    fake.codes.clear()
    launcher_env(NUM_SHARDS="2", SHARD_ID="0")
    assert launch(fake, capsys)[2] == ["inference"]
    launcher_env(K9_FINALIZE="1", NUM_SHARDS="2")
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ["merge", "calculate", "evaluate", "report"], out
    assert "finalize: merge + scoring" in out


def test_non_contiguous_array_is_refused(fake, launcher_env, capsys):
    launcher_env(**{**ARRAY_TASK0, "SLURM_ARRAY_TASK_STEP": "2"})
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == [] and "array indices must be contiguous" in out


def test_plain_shards_run_in_turn_then_merge(fake, launcher_env, capsys, tmp_path):
    launcher_env(NUM_SHARDS="2")
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ["download", "inference", "inference", "merge", "calculate", "evaluate", "report"], out
    assert (tmp_path / "out" / f"raw_{TAG}.shard1of2.json").exists()
    assert launch(fake, capsys)[2] == []


def signal_during(fake, key: str, signum: int) -> None:
    fake.hooks[key] = lambda argv: os.kill(os.getpid(), signum)


@pytest.mark.parametrize("signum, code", [(signal.SIGUSR1, 138), (signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_during_a_stage_stops_the_run_and_the_rerun_resumes(fake, launcher_env, capsys, signum, code):
    signal_during(fake, "eval_video_llm", signum)
    got, out, ran = launch(fake, capsys)
    assert got == code, out
    assert ran == ["download", "inference"]
    assert f"interrupted by {signal.Signals(signum).name} during step 'inference'; finished work is kept" in out
    fake.hooks.clear()
    got, out, ran = launch(fake, capsys)
    assert got == 0 and ran == ["inference", "calculate", "evaluate", "report"], out


def test_usr1_under_slurm_requeues_the_job(fake, launcher_env, slurm_bin, capsys):
    launcher_env(SLURM_JOB_ID="77")
    signal_during(fake, "evaluate_results:calculate", signal.SIGUSR1)
    got, out, ran = launch(fake, capsys)
    assert got == 0, out
    assert "time limit near: step 'calculate' saved its progress; requeueing job 77 to resume" in out
    assert "scontrol\nrequeue\n77\n" in slurm_bin.read_text()
    assert ran[-1] == "calculate" and "evaluate" not in ran


def test_stage_that_handles_the_signal_itself_is_still_requeued(fake, launcher_env, slurm_bin, capsys):
    """A stage with its own handler (it checkpoints, returns 75): the launcher still knows it was USR1."""
    def own_handler(argv):
        previous = signal.signal(signal.SIGUSR1, lambda *a: None)
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
        finally:
            signal.signal(signal.SIGUSR1, previous)
    launcher_env(SLURM_JOB_ID="78")
    fake.hooks["eval_video_llm"] = own_handler
    fake.codes["eval_video_llm"] = 75
    got, out, ran = launch(fake, capsys)
    assert got == 0 and "requeueing job 78" in out, out


def test_gpus_per_node_runs_data_parallel_workers_and_gpus_is_checked(fake, launcher_env, capsys):
    launcher_env(GPUS_PER_NODE="2")
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    argv = next(a for s, a in fake.calls if s == "eval_video_llm")
    assert option(argv, "--data_parallel") == "2"
    launcher_env(GPUS="4", SLURM_JOB_ID="9", CUDA_VISIBLE_DEVICES="0,1")
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == [] and "GPUS=4 but this job has 2 GPU(s): submit with sbatch --gpus=<type>:4" in out


def test_serve_url_runs_inference_through_the_openai_backend_with_the_video_transport(fake, launcher_env, capsys):
    launcher_env(SERVE_URL="http://127.0.0.1:8000/v1", DTYPE="bfloat16")
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    argv = next(a for s, a in fake.calls if s == "eval_video_llm")
    assert option(argv, "--backend") == "openai" and option(argv, "--base_url") == "http://127.0.0.1:8000/v1"
    assert option(argv, "--video_transport") == "video" and "--torch_dtype" not in argv
    assert option(argv, "--api_model") == option(argv, "--model_name_or_path")


@pytest.fixture
def fake_server(monkeypatch):
    events: list[str] = []

    @contextlib.contextmanager
    def start(settings, say, log_path):
        events.append(f"start {settings['MODEL_NAME']} tp={settings['TENSOR_PARALLEL']} args={list(settings.extra['SERVE_ARGS'])}")
        try:
            yield f"http://127.0.0.1:{40000 + len(events)}/v1"
        finally:
            events.append("stop")

    monkeypatch.setattr(pipeline_run, "start_server", start)
    # the preflight's `python -c "import vllm"` of the vLLM environment: a stand-in that succeeds
    monkeypatch.setenv("K9BENCH_VLLM_PYTHON", shutil.which("true") or "/bin/true")
    return events


def test_serve_vllm_starts_a_server_for_inference_and_stops_it(fake, launcher_env, fake_server, capsys):
    launcher_env(SERVE="vllm", SERVE_ARGS="--max-model-len 4096", TENSOR_PARALLEL="2")
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    assert fake_server == ["start " + os.environ["MODEL_NAME"] + " tp=2 args=['--max-model-len', '4096']", "stop"]
    argv = next(a for s, a in fake.calls if s == "eval_video_llm")
    assert option(argv, "--base_url") == "http://127.0.0.1:40001/v1"
    code, out, ran = launch(fake, capsys)
    assert ran == [] and len(fake_server) == 2  # the server's port is no setting: nothing reruns, nothing starts


@pytest.mark.parametrize("how", ["fails", "signal"])
def test_serve_vllm_stops_the_server_however_the_stage_ends(fake, launcher_env, fake_server, capsys, how):
    launcher_env(SERVE="vllm")
    if how == "fails":
        fake.codes["eval_video_llm"] = 1
    else:
        signal_during(fake, "eval_video_llm", signal.SIGTERM)
    code, out, ran = launch(fake, capsys)
    assert code == (1 if how == "fails" else 143), out
    assert fake_server[-1] == "stop" and len(fake_server) == 2


def test_merge_job_of_an_array_is_given_the_gpus(fake, launcher_env, slurm_bin, capsys):
    launcher_env(**ARRAY_TASK0, GPUS="2", CUDA_VISIBLE_DEVICES="0,1")
    assert launch(fake, capsys)[0] == 0
    assert "--gpus=2" in slurm_bin.read_text().splitlines()


def test_full_chain_names(fake, launcher_env, capsys):
    assert launch(fake, capsys)[2] == ALL


@pytest.mark.parametrize("when", ["in the last lines", "as the steps end"])
@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_a_signal_after_the_last_step_is_said_and_the_exit_code_is_the_run_s(fake, launcher_env, capsys, monkeypatch, signum, when):
    """Issue 40 item 4: SIGUSR1 0.5 s after the last stage killed the launcher (rc -10, a finished SLURM job FAILED).
    Now: one line, rc 0, and (called in process) the caller's handlers back afterwards."""
    before = signal.getsignal(signum)
    if when == "in the last lines":
        real_say = pipeline_run.say

        def say(message):
            real_say(message)
            if message.startswith("all steps done"):
                os.kill(os.getpid(), signum)

        monkeypatch.setattr(pipeline_run, "say", say)
    else:  # the last step has returned, the stop policy is still in force
        real_steps = pipeline_run.Launch.run_steps

        def run_steps(self):
            code = real_steps(self)
            os.kill(os.getpid(), signum)
            return code

        monkeypatch.setattr(pipeline_run.Launch, "run_steps", run_steps)
    got, out, ran = launch(fake, capsys)
    assert got == 0 and ran == ALL, out
    assert f"received {signal.Signals(signum).name} after the last step had finished: nothing left to stop; the exit code is the run's" in out
    assert "all steps done" in out and "interrupted" not in out
    assert signal.getsignal(signum) == before


def test_the_launcher_process_keeps_its_exit_code_through_a_signal_in_its_teardown(repo_root):
    """The launcher as a process keeps the handler to its end: a SIGUSR1 during the interpreter's teardown (an
    atexit hook here; the demo spent 1.6 to 4.4 s there) is said, and the exit code stays the run's."""
    import subprocess
    import sys

    code = ("import atexit, os, signal, time\n"
            "from k9bench.pipeline.run import _AfterTheLastStep\n"
            "with _AfterTheLastStep(keep=True):\n    pass\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGUSR1), time.sleep(0.3)))\n"
            "raise SystemExit(0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=repo_root,
                          env={**os.environ, "PYTHONPATH": str(repo_root)})
    assert done.returncode == 0, done.stderr
    assert "received SIGUSR1 after the last step had finished" in done.stdout
