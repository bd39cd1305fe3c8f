"""python -m k9bench.pipeline in process: the plan, reruns after each kind of change, the preflight,
secrets, the run lock. The stages are stand-ins (tests/pipeline_fakes.py) that write their outputs."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k9bench.pipeline import main
from tests.pipeline_fakes import REPO, TAG, fake, launcher_env, listener  # noqa: F401 (fixtures)

ALL = ["download", "inference", "calculate", "evaluate", "report"]
WITH_JUDGE = ["download", "inference", "calculate", "evaluate", "judge", "report"]


def launch(fake, capsys, *args: str) -> tuple[int, str, list[str]]:
    """One launcher run: (exit code, its stdout, the stages that ran)."""
    before = len(fake.calls)
    code = main(list(args))
    out = capsys.readouterr().out
    return code, out, fake.names()[before:]


def error_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if "ERROR" in ln]


def test_first_run_runs_every_stage_and_an_unchanged_rerun_runs_none(fake, launcher_env, capsys, tmp_path):
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    assert ran == ALL
    assert "all steps done" in out
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    assert ran == [], out  # the report included
    for name in ALL:
        assert f"step {name}: done already, skipping" in out


JUDGE_PROMPT = (REPO / "k9bench" / "prompts" / "judge_prompt.txt").read_text(encoding="utf-8")
SYSTEM_PROMPT = (REPO / "k9bench" / "prompts" / "system_prompt.txt").read_text(encoding="utf-8")


def _prompt_env(tmp_path: Path) -> dict:
    judge = tmp_path / "judge_prompt.txt"
    judge.write_text(JUDGE_PROMPT)
    system = tmp_path / "system_prompt.txt"
    system.write_text(SYSTEM_PROMPT)
    return {"JUDGE_ARGS": f"--prompt_file {judge}", "INFER_ARGS": f"--system_prompt_file {system} --max_new_tokens 24"}


CHANGES = [
    ("INFER_ARGS", lambda tmp, env: {"INFER_ARGS": env["INFER_ARGS"].replace("24", "5")}, WITH_JUDGE[1:]),
    ("MAX_FRAMES", lambda tmp, env: {"MAX_FRAMES": "6"}, WITH_JUDGE[1:]),
    ("EMBEDDING_MODEL", lambda tmp, env: {"EMBEDDING_MODEL": str(tmp / "models")}, WITH_JUDGE[2:]),
    ("SCORE_ARGS", lambda tmp, env: {"SCORE_ARGS": "--dtype float32"}, WITH_JUDGE[2:]),
    ("THRESHOLD", lambda tmp, env: {"THRESHOLD": "0.3"}, WITH_JUDGE[3:]),
    ("JUDGE_MODEL", lambda tmp, env: {"JUDGE_MODEL": "another-judge"}, WITH_JUDGE[4:]),
    ("judge prompt file", lambda tmp, env: (tmp / "judge_prompt.txt").write_text(JUDGE_PROMPT + "\nBe brief.\n") and {},
     WITH_JUDGE[4:]),
    ("system prompt file", lambda tmp, env: (tmp / "system_prompt.txt").write_text(SYSTEM_PROMPT + "\nBe brief.\n") and {},
     WITH_JUDGE[1:]),
    ("only how a stage runs (JUDGE_ARGS --concurrency, BATCH_SIZE)",
     lambda tmp, env: {"JUDGE_ARGS": env["JUDGE_ARGS"] + " --concurrency 2", "BATCH_SIZE": "3"}, []),
]


@pytest.mark.parametrize("what, change, expected", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_change_reruns_its_stage_and_the_ones_after_and_none_before(fake, launcher_env, listener, capsys, tmp_path,
                                                                      what, change, expected):
    env = launcher_env(JUDGE_BASE_URL=listener, **_prompt_env(tmp_path))
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == WITH_JUDGE, out
    launcher_env(**{**_prompt_env(tmp_path), "JUDGE_BASE_URL": listener, **(change(tmp_path, env) or {})})
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    assert ran == expected, out
    if expected:
        first = expected[0]
        line = next(ln for ln in out.splitlines() if f"step {first}: runs: " in ln)
        assert "settings differ" in line or "changed" in line or "missing" in line, line
    code, out, ran = launch(fake, capsys)
    assert ran == [], out


def test_changed_infer_args_reruns_inference_and_says_why(fake, launcher_env, capsys, tmp_path):
    """The reason is the real InferenceStage's (its fingerprint); setting the old records aside is its own
    ``redo_changed`` (tests/test_inference_records.py)."""
    launcher_env(INFER_ARGS="--max_new_tokens 24")
    assert launch(fake, capsys)[0] == 0
    raw = tmp_path / "out" / f"raw_{TAG}.json"
    launcher_env(INFER_ARGS="--max_new_tokens 5")
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran[:1] == ["inference"]
    assert "step inference: runs: settings differ: records.generation.max_new_tokens: 24 in the existing file, 5 now" in out
    assert " ".join(json.loads(raw.read_text())["argv"]).endswith("--max_new_tokens 5")


def test_dry_run_prints_the_plan_and_runs_nothing(fake, launcher_env, capsys, tmp_path):
    assert launch(fake, capsys)[0] == 0
    launcher_env(THRESHOLD="0.25")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    code, out, ran = launch(fake, capsys, "--dry_run")
    assert code == 0 and ran == []
    plan = {ln.split()[2]: ln for ln in out.splitlines() if ln.startswith("[run_eval") and len(ln.split()) > 3 and
            ln.split()[2] in ALL and ln.split()[3] in ("run", "skip")}
    assert set(plan) == set(ALL), out
    assert plan["download"].split()[3] == "skip" and plan["calculate"].split()[3] == "skip"
    assert "run" in plan["evaluate"] and "settings differ: threshold" in plan["evaluate"]
    assert "an earlier stage runs (evaluate)" in plan["report"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("env, message", [
    ({"INFER_ARGS": "--max_new_tokens many"}, "INFER_ARGS: "),
    ({"INFER_ARGS": "--no_such_flag"}, "INFER_ARGS: "),
    ({"SCORE_ARGS": "--dtype fp3"}, "SCORE_ARGS: "),
    ({"JUDGE_ARGS": "--concurrency many"}, "JUDGE_ARGS: "),
    ({"INFER_ARGS": "--max_new_tokens 'unclosed"}, "INFER_ARGS cannot be split into arguments"),
    ({"EMBEDDING_MODEL": "/no/such/embedding"}, "EMBEDDING_MODEL=/no/such/embedding: no such folder"),
    ({"MODEL_NAME": "./nomodel"}, "MODEL_NAME=./nomodel: no such folder"),
    ({"SERVE": "vllm", "SERVE_URL": "http://127.0.0.1:9/v1"}, "SERVE=vllm and SERVE_URL exclude each other"),
    ({"TENSOR_PARALLEL": "2"}, "TENSOR_PARALLEL goes with SERVE=vllm (the launcher then starts the server) or BACKEND=vllm, not BACKEND=hf"),
    ({"GPUS": "0"}, "GPUS must be"),
    ({"NUM_SHARDS": "0"}, "NUM_SHARDS must be a positive integer"),
    ({"NUM_SHARDS": "2", "SHARD_ID": "2"}, "SHARD_ID must be in 0..1"),
])
def test_bad_value_is_refused_before_any_stage(fake, launcher_env, capsys, tmp_path, env, message):
    launcher_env(**env)
    code, out, ran = launch(fake, capsys)
    assert code == 2, out
    assert ran == [] and "step " not in out
    errors = error_lines(out)
    assert len(errors) == 1 and message in errors[0], out
    assert "Traceback" not in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("model", ["x; touch PWNED", "$(touch PWNED)", "`touch PWNED`", "a|touch PWNED", "m && touch PWNED"])
def test_model_name_with_shell_metacharacters_is_refused_never_executed(fake, launcher_env, capsys, tmp_path, model):
    launcher_env(MODEL_NAME=model)
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == []
    assert f"MODEL_NAME={model}: no such folder" in out
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_model_name_with_metacharacters_that_exists_is_taken_literally(fake, launcher_env, capsys, tmp_path):
    """A local folder whose name holds shell metacharacters is just a name: passed as one argument."""
    odd = tmp_path / "models" / "m;$(touch PWNED)"
    odd.mkdir()
    launcher_env(MODEL_NAME=str(odd))
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    argv = next(a for s, a in fake.calls if s == "eval_video_llm")
    assert argv[argv.index("--model_name_or_path") + 1] == str(odd)
    assert not list(tmp_path.rglob("PWNED"))


def test_secrets_inside_args_are_masked_everywhere(fake, launcher_env, listener, capsys, tmp_path):
    canary = "sk-canary-in-args-0123456789"
    launcher_env(JUDGE_BASE_URL=listener.replace("http://", f"http://user:{canary}-url@"), OPENAI_API_KEY=canary + "env",
                 INFER_ARGS=f"--extra_body {shlex.quote(json.dumps({'api_key': canary + 'x'}))}")
    code, out, ran = launch(fake, capsys)
    assert code == 0 and "judge" in ran, out
    assert canary not in out
    for path in tmp_path.rglob("*"):
        if path.is_file() and ".k9bench" in path.parts:
            assert canary not in path.read_text(), path  # stage records hold no secret


def test_secret_after_a_secret_named_flag_is_masked_even_in_the_refusal(fake, launcher_env, listener, capsys):
    """JUDGE_ARGS='--api_key SECRET' (the judge reads its key from OPENAI_API_KEY only): refused, the key masked."""
    canary = "sk-canary-judge-args-987654321"
    launcher_env(JUDGE_BASE_URL=listener, JUDGE_ARGS=f"--api_key {canary}")
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == []
    assert canary not in out and "JUDGE_ARGS: " in out and "--api_key ***" in out


def test_judge_endpoint_that_does_not_answer_fails_before_any_stage(fake, launcher_env, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    launcher_env(JUDGE_BASE_URL=f"http://127.0.0.1:{port}/v1")
    started = time.monotonic()
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == []
    assert f"JUDGE_BASE_URL=http://127.0.0.1:{port}/v1: nothing answers at 127.0.0.1:{port}" in out
    assert time.monotonic() - started < 10


def test_failing_stage_is_named_and_stops_the_run(fake, launcher_env, capsys):
    fake.codes["evaluate_results:calculate"] = 1
    code, out, ran = launch(fake, capsys)
    assert code == 1 and ran == ["download", "inference", "calculate"]
    assert "ERROR: step calculate failed (exit 1)" in out
    fake.codes.clear()
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ["calculate", "evaluate", "report"], out  # its last run did not complete


def test_judge_with_skipped_entries_reports_then_fails_and_the_rerun_retries(fake, launcher_env, listener, capsys):
    launcher_env(JUDGE_BASE_URL=listener)
    fake.codes["subjective_evals"] = 1
    code, out, ran = launch(fake, capsys)
    assert code == 1 and ran == WITH_JUDGE
    assert "step judge: some entries were skipped" in out and "ERROR: step judge incomplete" in out
    fake.codes.clear()
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ["judge", "report"], out
    judge_argv = [a for s, a in fake.calls if s == "subjective_evals"]
    assert judge_argv[-1] == judge_argv[-2]  # the same command: the judge retries only what it skipped


def test_download_failures_go_on_unless_strict(fake, launcher_env, capsys):
    fake.codes["download_videos"] = 1
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ALL
    assert "step download: some videos could not be fetched" in out
    code, out, ran = launch(fake, capsys)
    assert ran == ["download"]  # failed videos are retried; nothing after it depends on them
    launcher_env(DOWNLOAD_STRICT="1")
    code, out, ran = launch(fake, capsys)
    assert code == 1 and ran == ["download"] and "ERROR: step download failed (exit 1)" in out


def test_stray_arguments_are_refused_and_help_lists_every_variable(fake, launcher_env, capsys, tmp_path):
    code, out, ran = launch(fake, capsys, "MAX_SAMPLES=-1")
    assert code == 2 and "takes no arguments but --dry_run (got 'MAX_SAMPLES=-1')" in out and ran == []
    assert not (tmp_path / "out").exists()
    code, out, _ = launch(fake, capsys, "--help")
    assert code == 0
    for name in ("MODEL_NAME", "MAX_FRAMES", "OUT_DIR", "INFER_ARGS", "SERVE", "SERVE_URL", "GPUS", "GPUS_PER_NODE", "VENV", "DEMO"):
        assert f"\n  {name} " in out, name
    assert "create it first" not in out and "of one video" not in out and "#" not in out
    # every name stands apart from its text, the longest too (it read "K9BENCH_VLLM_PYTHONSERVE=vllm: ...")
    assert "\n  K9BENCH_VLLM_PYTHON  SERVE=vllm: " in out and "\n  EMBED_BATCH_SIZE " in out


# --------------------------------------------------------------------------- the run lock


def lock_file(tmp_path: Path) -> Path:
    return tmp_path / "out" / f".run_{TAG}"


def test_second_launcher_on_the_same_run_refuses_at_once_naming_the_holder(fake, launcher_env, capsys, tmp_path):
    from k9bench.stage import output_lock

    with output_lock(lock_file(tmp_path)):
        started = time.monotonic()
        code, out, ran = launch(fake, capsys)
        elapsed = time.monotonic() - started
    assert code == 2 and ran == []
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in out
    assert elapsed < 3.0, elapsed  # at once: a waiting lock would block for good
    assert launch(fake, capsys)[0] == 0  # released: the next run goes


def test_lock_of_a_sigkilled_launcher_does_not_block_the_rerun(fake, launcher_env, capsys, tmp_path):
    target = lock_file(tmp_path)
    code = ("import sys, time; from k9bench.stage import output_lock\n"
            f"with output_lock({str(target)!r}):\n    print('locked', flush=True); time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert launch(fake, capsys)[0] == 2
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
    assert Path(str(target) + ".lock").exists()  # left behind by the killed holder
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ALL, out


def test_shard_runs_lock_only_their_shard(fake, launcher_env, capsys, tmp_path):
    from k9bench.stage import output_lock

    launcher_env(NUM_SHARDS="2", SHARD_ID="1")
    with output_lock(tmp_path / "out" / f".run_{TAG}.shard0of2"):
        code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == ["download", "inference"], out
    assert "shard 1 of 2 done" in out and "K9_FINALIZE=1 NUM_SHARDS=2 bash run_eval.sh" in out


def test_raw_file_without_a_stage_block_is_a_reason_to_run_inference(fake, launcher_env, capsys, tmp_path):
    """A raw file an older launcher or a hand run left: the InferenceStage's own done() says so and it runs
    (keeping the records made with these settings, setting the others aside: its ``redo_changed``)."""
    out = tmp_path / "out"
    out.mkdir()
    raw = out / f"raw_{TAG}.json"
    raw.write_text(json.dumps({"individual_results": [], "model_name_or_path": os.environ["MODEL_NAME"]}))
    code, out_text, ran = launch(fake, capsys)
    assert code == 0 and ran == ALL, out_text
    assert f"step inference: runs: {raw} records no stage settings" in out_text


def test_an_in_process_run_leaves_the_environment_as_it_was(fake, launcher_env, capsys, monkeypatch):
    monkeypatch.delenv("K9BENCH_INTERFACE", raising=False)
    assert launch(fake, capsys)[0] == 0
    assert "K9BENCH_INTERFACE" not in os.environ


# --------------------------------------------------------------------------- issue 40 item 7: small ones


def test_the_lock_refusal_names_the_run_and_a_lock_file_that_exists(fake, launcher_env, capsys, tmp_path):
    """It named ``OUT_DIR run .../.run_<tag>``, a path that never exists."""
    import re

    from k9bench.stage import output_lock

    with output_lock(lock_file(tmp_path)):
        code, out, ran = launch(fake, capsys)
        (line,) = error_lines(out)
        named = re.search(r"\(lock (\S+)\)", line)
        assert named and Path(named.group(1)).is_file()
    assert code == 2 and ran == []
    assert f"another launcher is running this run: the run {TAG} in OUT_DIR={tmp_path / 'out'} is being written by pid" in line
    assert f".run_{TAG} is" not in line


def test_a_resumed_step_says_it_resumes(fake, launcher_env, capsys, tmp_path):
    """A stage with a checkpoint from a stopped run: "resumes from <checkpoint>", not "raw... is missing"."""
    from k9bench.layout import checkpoint_path

    out = tmp_path / "out"
    out.mkdir()
    partial = checkpoint_path(out / f"raw_{TAG}.json")
    partial.write_text('{"idx": 0}\n')
    code, text, ran = launch(fake, capsys)
    assert code == 0 and ran == ALL, text
    assert f"step inference: runs: resumes from {partial}" in text
    assert f"raw_{TAG}.json is missing" not in text


def test_help_into_a_closed_pipe_exits_0_without_a_traceback(repo_root, tmp_path):
    """`bash run_eval.sh --help | head -3` printed a BrokenPipeError traceback and exited 1: here the pipe's
    reader is gone before the first write, as head's is after its third line."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(["bash", str(repo_root / "run_eval.sh"), "--help"], stdout=write, stderr=subprocess.PIPE, text=True,
                              timeout=120, cwd=tmp_path, env={**os.environ, "K9BENCH_DIR": str(repo_root)})
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
