"""run_eval.sh under a real one-node SLURM cluster on loopback (.ci/slurm/start.sh).

The unmodified script is submitted with sbatch (it execs ``python -m k9bench.pipeline``, which is then
the batch shell): the demo as one job that is requeued twice while it runs (once by the launcher after
SLURM's USR1, as before a time limit, once by ``scontrol requeue``) and still finishes with every
question answered once; then an array run whose task 0 submits the merge job, which must end with the
same eval file as the single job.

Skipped, with the reason, when the slurm and munge binaries are absent or not root
(CI installs them with .ci/slurm/install.sh before entering its loopback-only namespace).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.pipeline_fakes import checkpoint_lines, comparable_eval
from tests.test_launcher import REPO, SCRIPT, TAG, clean_env

SLURM_BINARIES = ("slurmctld", "slurmd", "munged", "sbatch", "scontrol", "squeue", "sinfo", "scancel")
SEARCH_PATH = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
SLURM_INFER_ARGS = "--device cpu --max_new_tokens 128 --greedy"
"""Longer answers than the plain-bash tests: the signals must land while inference runs."""

pytestmark = pytest.mark.slow


def _missing_binaries() -> list[str]:
    return [b for b in SLURM_BINARIES if shutil.which(b, path=SEARCH_PATH) is None]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A running cluster; yields the environment (SLURM_CONF set) for sbatch and friends."""
    missing = _missing_binaries()
    if missing:
        pytest.skip(f"SLURM not installed ({', '.join(missing)} missing): run .ci/slurm/install.sh as root")
    if os.geteuid() != 0:
        pytest.skip("the CI SLURM cluster runs its daemons as root")
    state = tmp_path_factory.mktemp("slurm_state")
    env = dict(os.environ, PATH=SEARCH_PATH, K9_SLURM_CTLD_PORT="26817", K9_SLURM_SLURMD_PORT="26818")
    start = subprocess.run(["bash", str(REPO / ".ci" / "slurm" / "start.sh"), str(state)], env=env,
                           capture_output=True, text=True, timeout=120)
    assert start.returncode == 0, start.stdout + start.stderr
    env["SLURM_CONF"] = str(state / "etc" / "slurm.conf")
    try:
        yield env
    finally:
        subprocess.run(["bash", str(REPO / ".ci" / "slurm" / "stop.sh"), str(state)], env=env, capture_output=True, timeout=120)


def slurm_cmd(env: dict, *args: str) -> str:
    proc = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def job_fields(env: dict, job: str) -> list[dict]:
    """``scontrol show job -o`` as one dict per job (an array gives one per task)."""
    out = slurm_cmd(env, "scontrol", "show", "job", "-o", job)
    return [dict(re.findall(r"(\w+)=(\S*)", line)) for line in out.splitlines() if line.strip()]


def wait_done(env: dict, job: str, timeout: float = 420) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        fields = job_fields(env, job)
        if fields and all(f.get("JobState") in TERMINAL for f in fields):
            return fields
        assert time.monotonic() < deadline, f"job {job} still {[f.get('JobState') for f in fields]}"
        time.sleep(0.5)


def wait_for(predicate, what: str, timeout: float = 300, fail_if=None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if fail_if is not None:
            fail_if()
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def job_env(slurm_env: dict, tmp: Path, videos: Path, model_dir: Path | None = None) -> dict:
    """The demo's settings; without ``model_dir`` the job builds the tiny model itself."""
    env = clean_env(DEMO="1", OUT_DIR=str(tmp / "out"), VIDEO_DIR=str(videos), INFER_ARGS=SLURM_INFER_ARGS,
                    K9BENCH_DIR=str(REPO), REPORT="0")
    if model_dir is not None:
        env["MODEL_NAME"] = str(model_dir)
    env.update(PATH=slurm_env["PATH"], SLURM_CONF=slurm_env["SLURM_CONF"])
    return env


def submit(env: dict, cwd: Path, *options: str, submit_dir: Path | None = None) -> str:
    """sbatch the unmodified script; the job works in ``cwd`` (``--chdir``), sbatch runs in ``submit_dir``."""
    (cwd / "slurm_logs").mkdir(exist_ok=True)
    proc = subprocess.run(["sbatch", "--parsable", f"--chdir={cwd}", *options, str(SCRIPT)], cwd=submit_dir or cwd, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().split(";")[0]


def read_log(cwd: Path, name: str) -> str:
    path = cwd / "slurm_logs" / name
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def shared_videos(tmp_path_factory) -> Path:
    from k9bench.data.demo import make_demo_videos

    folder = tmp_path_factory.mktemp("slurm_videos")
    make_demo_videos(folder)
    return folder


@pytest.fixture(scope="module")
def single_job(slurm, tmp_path_factory, shared_videos):
    """``sbatch run_eval.sh`` on the demo, requeued by USR1 and by scontrol while it runs."""
    tmp = tmp_path_factory.mktemp("slurm_single")
    env = job_env(slurm, tmp, shared_videos)
    job = submit(env, tmp)
    log_name = f"k9bench-eval-{job}.out"
    partial = tmp / "out" / f"raw_{TAG}.json.partial.jsonl"

    def job_not_failed():
        state = job_fields(slurm, job)[0].get("JobState")
        assert state not in TERMINAL, f"job ended ({state}) too early:\n{read_log(tmp, log_name)[-3000:]}"

    # 1. USR1 to the batch shell (what --signal=B:USR1@100 does before the time limit)
    wait_for(lambda: checkpoint_lines(partial) >= 2, "inference to checkpoint", fail_if=job_not_failed)
    slurm_cmd(slurm, "scancel", "--signal=USR1", "--batch", job)
    wait_for(lambda: "requeued run (restart 1)" in read_log(tmp, log_name), "the self-requeue", timeout=180, fail_if=job_not_failed)
    first = checkpoint_lines(partial)
    # 2. scontrol requeue while the requeued run works (inference if it is still running)
    wait_for(lambda: checkpoint_lines(partial) > first or (tmp / "out" / f"raw_{TAG}.json").exists(),
             "progress after the restart", fail_if=job_not_failed)
    slurm_cmd(slurm, "scontrol", "requeue", job)
    fields = wait_done(slurm, job)
    return tmp, job, fields[0], read_log(tmp, log_name)


def test_sbatch_demo_survives_two_requeues(single_job):
    tmp, job, fields, log = single_job
    assert fields["JobState"] == "COMPLETED", log[-4000:]
    assert fields["Restarts"] == "2"
    assert f"time limit near: step 'inference' saved its progress; requeueing job {job} to resume" in log
    assert "interrupted by SIGTERM during step" in log  # scontrol requeue
    assert "requeued run (restart 2): resuming every stage" in log
    assert re.search(r"\b\d+ already done", log)  # inference resumed from its checkpoint
    assert f"slurm job        {job}" in log
    assert log.count("all steps done") == 1
    raw = json.loads((tmp / "out" / f"raw_{TAG}.json").read_text())
    idxs = [r["idx"] for r in raw["individual_results"]]
    assert sorted(idxs) == list(range(12)) and len(set(idxs)) == 12
    ev = json.loads((tmp / "out" / f"eval_{TAG}.json").read_text())
    assert ev["total_count"] == 12
    assert not list((tmp / "out").glob("*.partial.jsonl"))


def test_sbatch_array_with_merge_job_matches_the_single_job(slurm, single_job, tmp_path, shared_videos):
    single_tmp = single_job[0]
    env = job_env(slurm, tmp_path, shared_videos, single_tmp / "out" / "tiny-qwen3vl")
    # submitted from the repository root as the README says: the script finds it without K9BENCH_DIR
    del env["K9BENCH_DIR"]
    array = submit(env, tmp_path, "--array=0-1", submit_dir=REPO)
    tasks = wait_done(slurm, array)
    logs = {t["JobId"]: read_log(tmp_path, f"k9bench-eval-{t['JobId']}.out") for t in tasks}
    # each task's log is also found under the array's name (%x-%A_%a.out), as a link
    for i in range(2):
        assert (tmp_path / "slurm_logs" / f"k9bench-eval-{array}_{i}.out").is_symlink(), sorted((tmp_path / "slurm_logs").iterdir())
    assert all(t["JobState"] == "COMPLETED" for t in tasks), "\n".join(v[-2000:] for v in logs.values())
    out = tmp_path / "out"
    marker = out / f".finalize_{array}.jobid"
    merge_job = marker.read_text().strip()
    merge = wait_done(slurm, merge_job)[0]
    merge_log = read_log(tmp_path, f"k9bench-eval-merge-{merge_job}.out")
    assert merge["JobState"] == "COMPLETED", merge_log[-4000:]
    assert f"afterok:{array}" in merge.get("Dependency", "") or merge.get("Dependency") in ("(null)", "")

    shards = [json.loads((out / f"raw_{TAG}.shard{i}of2.json").read_text()) for i in range(2)]
    scenes = [{r["scene_name"] for r in s["individual_results"]} for s in shards]
    assert scenes[0] and scenes[1] and not scenes[0] & scenes[1], "shards split by video"
    assert "step demo-model: " in single_job[3]
    assert all(f"repository       {REPO}" in v for v in logs.values())
    assert f"its log: {tmp_path / 'slurm_logs' / f'k9bench-eval-merge-{merge_job}.out'}" in "".join(logs.values())
    assert "step merge: " in merge_log and "finalize: merge + scoring" in merge_log
    assert "step inference" not in merge_log and "step download" not in merge_log
    assert sum("step submit-finalize" in v for v in logs.values()) == 1
    merged = json.loads((out / f"raw_{TAG}.json").read_text())
    assert [r["idx"] for r in merged["individual_results"]] == list(range(12))
    # per-shard counters are the whole run's (or listed per shard), not shard 0's
    assert merged["failed_count"] == sum("error" in r for r in merged["individual_results"])
    assert merged["token_totals"]["output"] == sum(s["token_totals"]["output"] for s in shards)
    assert [s["shard_id"] for s in merged["run_stats"]["per_shard"]] == [0, 1]
    assert merged["run_stats"]["generated"] == sum(s["run_stats"]["generated"] for s in shards)
    assert "shard_id" not in merged and "num_shards" not in merged
    assert comparable_eval(out / f"eval_{TAG}.json") == comparable_eval(single_tmp / "out" / f"eval_{TAG}.json")


def test_failed_array_task_cancels_the_merge_job(slurm, tmp_path, tiny_model_dir):
    """The cluster has no kill_invalid_depend (as by default): the merge job's own
    --kill-on-invalid-dep=yes must cancel it when a task fails, not leave it pending forever. The dataset
    file exists (a missing one is refused by the launcher's preflight, before any task state) but its row
    is not a K9-Bench row, so each task fails at its first step."""
    from k9bench.scoring.embedding import bundled_small_model_path

    (tmp_path / "bad.jsonl").write_text('{"idx": 0, "broken": true}\n')
    env = clean_env(OUT_DIR=str(tmp_path / "out"), VIDEO_DIR=str(tmp_path / "v"), DATASET_NAME=str(tmp_path / "bad.jsonl"),
                    MODEL_NAME=str(tiny_model_dir), EMBEDDING_MODEL=str(bundled_small_model_path()),
                    K9BENCH_DIR=str(REPO))
    env.update(PATH=slurm["PATH"], SLURM_CONF=slurm["SLURM_CONF"])
    array = submit(env, tmp_path, "--array=0-1")
    tasks = wait_done(slurm, array, timeout=120)
    assert all(t["JobState"] == "FAILED" for t in tasks), [t["JobState"] for t in tasks]
    logs = "".join(read_log(tmp_path, f"k9bench-eval-{t['JobId']}.out") for t in tasks)
    assert "ERROR: step download failed (exit 2)" in logs
    merge_job = (tmp_path / "out" / f".finalize_{array}.jobid").read_text().strip()
    merge = wait_done(slurm, merge_job, timeout=60)[0]
    assert merge["JobState"] == "CANCELLED", merge
    assert not read_log(tmp_path, f"k9bench-eval-merge-{merge_job}.out"), "the merge job must never start"
