"""SLURM: the array's shards and merge job, the requeue before the time limit, the GPUs, the logs.

An array task (``sbatch --array=0-7 run_eval.sh``) runs the download (one task at a time, through a
lock in VIDEO_DIR) and its inference shard; task 0 also submits the merge job once (afterok on the
whole array, ``--kill-on-invalid-dep=yes``), which merges the shards and scores. USR1 (SLURM's
``--signal=B:USR1@100``, 100 s before the time limit) stops the running stage with its progress saved;
the launcher then requeues the job (``scontrol requeue``) and the requeued run resumes.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Callable, Mapping

from k9bench.pipeline.env import LaunchError
from k9bench.pipeline.stages import ShardMode

ARRAY_VARS = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
              "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP", "SLURM_RESTART_COUNT")
"""The array task's own variables: never passed on to the merge job."""


def _positive(name: str, text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise LaunchError(f"{name} must be a positive integer, got {text!r}")
    return int(text)


def shard_mode(env: Mapping[str, str], finalize: bool) -> ShardMode:
    """NUM_SHARDS and SHARD_ID, by default the array's size and this task's index."""
    in_array = bool(env.get("SLURM_ARRAY_JOB_ID")) and int(env.get("SLURM_ARRAY_TASK_COUNT") or 1) > 1 and not finalize
    num, shard = env.get("NUM_SHARDS", ""), env.get("SHARD_ID", "")
    if in_array:
        step = env.get("SLURM_ARRAY_TASK_STEP") or "1"
        if step != "1":
            raise LaunchError(f"array indices must be contiguous (e.g. --array=0-7), got step {step}")
        num = num or env["SLURM_ARRAY_TASK_COUNT"]
        shard = shard or str(int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN") or 0))
    num_shards = _positive("NUM_SHARDS", num) if num else 1
    shard_id = None
    if shard:
        if not shard.isdigit() or int(shard) >= num_shards:
            raise LaunchError(f"SHARD_ID must be in 0..{num_shards - 1}, got {shard!r}")
        shard_id = int(shard)
    return ShardMode(num_shards=num_shards, shard_id=shard_id, finalize=finalize, in_array=in_array)


def job_line(env: Mapping[str, str]) -> str:
    """``slurm job  N (array A_a) on NODE, restart R`` for the configuration block."""
    if not env.get("SLURM_JOB_ID"):
        return "none (plain bash)"
    array = f" (array {env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')})" if env.get("SLURM_ARRAY_JOB_ID") else ""
    return f"{env['SLURM_JOB_ID']}{array} on {env.get('SLURMD_NODENAME', '?')}, restart {env.get('SLURM_RESTART_COUNT', '0')}"


def allocated_gpus(env: Mapping[str, str]) -> int | None:
    """The GPUs this job can see (CUDA_VISIBLE_DEVICES, else SLURM's count); None when unknown."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS"):
        text = env.get(name, "")
        count = text.rsplit(":", 1)[-1]
        if count.isdigit():
            return int(count)
    return None


def check_gpus(env: Mapping[str, str], gpus: str, per_node: str) -> None:
    """Inside a SLURM job, the GPUs asked for (GPUS, GPUS_PER_NODE) are the ones the job got: the header's
    ``--gpus=a40:1`` is read by sbatch before this script runs, so more GPUs are asked at submission."""
    wanted = max(int(gpus or 0), int(per_node or 0))
    if not wanted or not env.get("SLURM_JOB_ID"):
        return
    have = allocated_gpus(env)
    if have is not None and have < wanted:
        raise LaunchError(f"GPUS={wanted} but this job has {have} GPU(s): submit with sbatch --gpus=<type>:{wanted} run_eval.sh "
                          f"(or SBATCH_GPUS=<type>:{wanted} sbatch run_eval.sh), which overrides the header's --gpus")


def merge_log(cwd: Path, job_name: str, job_id: str) -> Path:
    return cwd / "slurm_logs" / f"{job_name}-{job_id}.out"


def submit_finalize(env: Mapping[str, str], *, out_dir: Path, num_shards: int, repo: Path, script: str,
                    log: Callable[[str], None]) -> None:
    """Array task 0: submit the merge job once (a requeued task 0 finds the marker and submits nothing)."""
    array = env["SLURM_ARRAY_JOB_ID"]
    marker = out_dir / f".finalize_{array}.jobid"
    if marker.is_file() and marker.read_text().strip():
        log(f"finalize job already submitted: {marker.read_text().strip()}")
        return
    name = f"{env.get('SLURM_JOB_NAME') or 'k9bench-eval'}-merge"
    child = {k: v for k, v in env.items() if k not in ARRAY_VARS}
    cmd = ["sbatch", "--parsable", f"--job-name={name}", f"--dependency=afterok:{array}", "--kill-on-invalid-dep=yes",
           f"--output=slurm_logs/{name}-%j.out",
           f"--export=ALL,K9_FINALIZE=1,NUM_SHARDS={num_shards},SHARD_ID=,K9BENCH_DIR={repo}"]
    if env.get("GPUS"):
        cmd.append(f"--gpus={env['GPUS']}")
    try:
        proc = subprocess.run([*cmd, script], env=child, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StepFailed(1, f"step submit-finalize failed: could not submit the merge job ({exc})") from None
    if proc.returncode != 0:
        raise StepFailed(1, f"step submit-finalize failed: could not submit the merge job ({(proc.stderr or proc.stdout).strip()})")
    job = proc.stdout.strip().split(";")[0]
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(job + "\n")
    log(f"step submit-finalize: job {job} merges the {num_shards} shards after array {array} succeeds, then scores; "
        f"its log: {merge_log(Path.cwd(), name, job)}")


def link_array_log(env: Mapping[str, str], log: Callable[[str], None]) -> None:
    """An array task's log, named by its job id (``%x-%j.out``), also gets the array's name
    ``<job name>-<array id>_<task>.out`` (a link beside it): ``%x-%A_%a.out`` in the header would name
    every non-array job ``..._4294967294.out``."""
    if not (env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_JOB_ID")):
        return
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", env["SLURM_JOB_ID"]], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return
    stdout = next((part[len("StdOut="):] for part in out.split() if part.startswith("StdOut=")), "")
    if not stdout or not Path(stdout).is_file():
        return
    name = f"{env.get('SLURM_JOB_NAME') or 'k9bench-eval'}-{env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}.out"
    link = Path(stdout).with_name(name)
    if link.name != Path(stdout).name and not link.exists():
        with contextlib.suppress(OSError):
            link.symlink_to(Path(stdout).name)
            log(f"log of array task {env['SLURM_ARRAY_JOB_ID']}_{env.get('SLURM_ARRAY_TASK_ID', '')}: {link}")


def requeue(env: Mapping[str, str]) -> str | None:
    """``scontrol requeue`` this job; None when done, else why it failed."""
    try:
        proc = subprocess.run(["scontrol", "requeue", env["SLURM_JOB_ID"]], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip() or f"exit {proc.returncode}"


class StepFailed(Exception):
    """A step failed: the run stops with ``exit_code`` and this one line."""

    def __init__(self, exit_code: int, message: str):
        super().__init__(message)
        self.exit_code = exit_code
