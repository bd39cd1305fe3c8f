"""``eval_video_llm.py --data_parallel N``: every GPU of a node at once.

N worker processes start together, worker ``i`` on shard ``i`` of N (the ``--num_shards``/``--shard_id``
machinery: whole videos dealt round-robin) with ``CUDA_VISIBLE_DEVICES`` set to the ``i``-th visible GPU
(on a CPU the same N processes run, which is how this is tested). Each worker is an ordinary sharded run:
its own shard file (``<output>.shard{i}of{N}.json``), checkpoint, lock and resume. When every worker has
written its shard file they are merged into the output (:func:`k9bench.merge.merge_shards`); the shard
files stay beside it.

A worker that fails (exit other than 0, or 1 for a shard whose every question failed) fails the run: the
error names the worker, its exit code and where its finished records are; the other workers run to their
end, so every finished record survives and the rerun of the same command resumes each shard. A stop
signal is passed on to the workers (each saves its checkpoint) and the run exits 75.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from k9bench.artifact_io import write_json_atomic
from k9bench.layout import checkpoint_path
from k9bench.artifacts import provenance
from k9bench.layout import shard_path
from k9bench.inference.outcome import all_failed_exit
from k9bench.stage import EXIT_FAILED, EXIT_OK, Interrupted, Stage, StageError, deferred

log = logging.getLogger("k9bench.inference")

WORKER_CODE = "import sys; from k9bench.inference.stage import main; sys.exit(main(sys.argv[1:]))"
"""What each worker process runs (the package's own entry, so it works outside the checkout too)."""

_DROPPED_FLAGS = ("--data_parallel", "--num_shards", "--shard_id", "--output_file")
"""Flags of the parent's command line that each worker gets its own value of."""


def worker_argv(argv: list[str], output: Path, workers: int, index: int) -> list[str]:
    """The parent's command line for worker ``index``: without ``--data_parallel`` (and any shard or output
    flag), with ``--num_shards workers --shard_id index --output_file output``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in _DROPPED_FLAGS:
            skip = "=" not in arg
            continue
        out.append(arg)
    return [*out, "--num_shards", str(workers), "--shard_id", str(index), "--output_file", str(output)]


def visible_devices(workers: int) -> list[str]:
    """The ``CUDA_VISIBLE_DEVICES`` value of each worker: the i-th of the parent's list, else ``i``."""
    given = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if given and len(given) < workers:
        raise StageError(f"--data_parallel {workers}: CUDA_VISIBLE_DEVICES={','.join(given)} names only {len(given)} device(s)")
    return given[:workers] if given else [str(i) for i in range(workers)]


def _environment(device: str, index: int, workers: int) -> dict[str, str]:
    import k9bench

    env = dict(os.environ, CUDA_VISIBLE_DEVICES=device, K9BENCH_WORKER=f"{index}/{workers}")
    root = str(Path(k9bench.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def _wait(processes: list[subprocess.Popen]) -> list[int]:
    """Every worker's exit code; a stop signal here is passed on to the workers, which save their work."""
    try:
        while any(p.poll() is None for p in processes):
            time.sleep(0.2)
    except Interrupted as stop:
        for p in processes:
            if p.poll() is None:
                p.send_signal(stop.signum if stop.signum != signal.SIGINT else signal.SIGTERM)
        for p in processes:
            try:
                p.wait(timeout=120)
            except subprocess.TimeoutExpired:
                p.kill()
        raise
    return [p.returncode for p in processes]


def shard_stages(stage: Stage) -> list[Stage]:
    """The workers' stages (shard ``i`` of N each, of the stage's own class), as the parent sees them."""
    import dataclasses

    config = stage.config
    workers = config.data.data_parallel
    output = str(stage.outputs()[0])
    return [type(stage)(dataclasses.replace(config, data=dataclasses.replace(config.data, num_shards=workers, shard_id=i, data_parallel=1),
                                               output=dataclasses.replace(config.output, output_file=output)),
                           stage.argv, redo_changed=stage.redo_changed) for i in range(workers)]


def set_aside_changed_shards(stage: Stage) -> None:
    """With ``redo_changed`` (the launcher): each shard file or checkpoint made with other settings is set aside
    here, before the workers start (they run from the command line, which has no such mode)."""
    if stage.redo_changed:
        for shard in shard_stages(stage):
            shard.set_aside_if_changed()


def run_data_parallel(stage: Stage) -> int:
    """Run the stage's N shard workers at once, then merge their files into the stage's output."""
    from k9bench.merge import MergeError, merge_shards

    config = stage.config
    workers = config.data.data_parallel
    if stage.argv is None:
        raise StageError(f"--data_parallel {workers}: the workers need the command line (InferenceStage(config, argv))")
    output = stage.outputs()[0]
    devices = visible_devices(workers)
    set_aside_changed_shards(stage)
    shards = [shard_path(output, workers, i) for i in range(workers)]
    log.info("--data_parallel %d: starting %d worker processes (CUDA_VISIBLE_DEVICES %s), shard files %s", workers, workers,
             ", ".join(devices), ", ".join(str(s) for s in shards))
    processes = []
    for i, device in enumerate(devices):
        argv = worker_argv(stage.argv, output, workers, i)
        processes.append(subprocess.Popen([sys.executable, "-c", WORKER_CODE, *argv], env=_environment(device, i, workers)))
    codes = _wait(processes)
    failed = [(i, code) for i, code in enumerate(codes) if code not in (EXIT_OK, EXIT_FAILED) or not shards[i].exists()]
    if failed:
        parts = [f"worker {i} (shard {i} of {workers}, CUDA_VISIBLE_DEVICES={devices[i]}) exited {code}" for i, code in failed]
        raise StageError(f"--data_parallel {workers}: {'; '.join(parts)}; the finished records are kept in "
                         f"{', '.join(str(checkpoint_path(shards[i])) if not shards[i].exists() else str(shards[i]) for i, _ in failed)} "
                         f"and the other shard files; rerun the same command to resume", max(c for _, c in failed))
    try:
        result = merge_shards(shards, output)
    except MergeError as exc:
        raise StageError(f"--data_parallel {workers}: the shard files cannot be merged: {exc}", EXIT_FAILED) from None
    meta = result.artifact.meta
    meta["provenance"] = provenance("eval_video_llm.py", stage.argv, config.flat())
    meta["data_parallel"] = {"workers": workers, "devices": devices, "shard_files": [str(s) for s in shards], "exit_codes": codes}
    meta["stage"] = stage.stage_block()
    with deferred():
        write_json_atomic(output, result.artifact.to_dict())
    log.info("--data_parallel %d: merged %d shard file(s) into %s: %d record(s), %d failed", workers, workers, output,
             len(result.artifact.records), result.failed)
    return all_failed_exit([r.to_dict() for r in result.artifact.records], output)


__all__ = ["WORKER_CODE", "run_data_parallel", "set_aside_changed_shards", "shard_stages", "visible_devices", "worker_argv"]
