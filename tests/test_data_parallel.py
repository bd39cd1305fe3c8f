"""``eval_video_llm.py --data_parallel N`` on a CPU (issue 22): N worker processes at once, one shard each,
then one merge whose records equal the single-process run's; a failed worker fails the run clearly and
its finished records survive."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.layout import checkpoint_path
from k9bench.inference.data_parallel import visible_devices, worker_argv
from k9bench.inference.runner import EXIT_OK
from k9bench.tiny_model import build_tiny_qwen3vl

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOLATILE = ("timestamp",)
"""Record keys that differ between two identical runs."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny") / "qwen3vl", seed=0)


def args(tiny: Path, video_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["--model_name_or_path", str(tiny), "--dataset_name", "demo", "--video_dir", str(video_dir), "--max_frames", "4",
            "--max_pixels", "16384", "--min_pixels", "2048", "--max_new_tokens", "4", "--greedy", "--batch_size", "1",
            "--output_file", str(out), "-q", *extra]


def comparable_records(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in json.loads(path.read_text())["individual_results"]]


def test_worker_command_lines():
    argv = ["--data_parallel", "2", "--num_shards=3", "--max_samples", "4", "--output_file", "a.json", "--shard_id", "1", "-q"]
    assert worker_argv(argv, Path("out.json"), 2, 1) == ["--max_samples", "4", "-q", "--num_shards", "2", "--shard_id", "1",
                                                         "--output_file", "out.json"]


def test_each_worker_gets_one_of_the_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_devices(3) == ["0", "1", "2"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert visible_devices(2) == ["4", "6"]
    from k9bench.stage import StageError

    with pytest.raises(StageError, match="names only 2 device"):
        visible_devices(3)


def test_two_workers_run_at_once_and_merge_to_the_single_process_records(tiny, demo_video_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    single = tmp_path / "single.json"
    assert eval_video_llm.main(args(tiny, demo_video_dir, single)) == EXIT_OK
    merged = tmp_path / "dp" / "raw.json"
    merged.parent.mkdir()
    assert eval_video_llm.main(args(tiny, demo_video_dir, merged, "--data_parallel", "2")) == EXIT_OK

    data = json.loads(merged.read_text())
    assert comparable_records(merged) == comparable_records(single)
    assert data["total_count"] == 12 and data["failed_count"] == 0
    assert data["data_parallel"]["workers"] == 2 and data["data_parallel"]["exit_codes"] == [0, 0]
    assert data["data_parallel"]["devices"] == ["0", "1"] and data["provenance"]["args"]["data_parallel"] == 2
    assert data["stage"]["name"] == "inference" and "num_shards" not in data["stage"]["fingerprint"]["data"]
    assert data["videos"] == json.loads(single.read_text())["videos"]
    # the two workers ran at the same time: each one's span (stage start to final write) overlaps the other's
    spans = sorted((s["started_at"], s["finished_at"]) for s in data["run_stats"]["per_shard"])
    assert len(spans) == 2 and spans[1][0] < spans[0][1], spans
    # each worker wrote its own shard file, which stays beside the merged one
    for i in range(2):
        shard = json.loads((tmp_path / "dp" / f"raw.shard{i}of2.json").read_text())
        assert (shard["num_shards"], shard["shard_id"]) == (2, i)
    # the rerun of the same command does nothing new: every shard is finished
    before = {p.name: p.read_bytes() for p in merged.parent.iterdir() if ".shard" in p.name}
    assert eval_video_llm.main(args(tiny, demo_video_dir, merged, "--data_parallel", "2")) == EXIT_OK
    assert {p.name: p.read_bytes() for p in merged.parent.iterdir() if ".shard" in p.name} == before
    assert comparable_records(merged) == comparable_records(single)


def test_a_failed_worker_fails_the_run_and_finished_records_survive(tiny, demo_video_dir, tmp_path, capfd, monkeypatch):
    """Worker 1 cannot write its shard file (a folder stands there): it exits 2 and the run fails, naming it;
    worker 0 runs to its end, and its shard is reused as it is by the rerun once the cause is gone."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    out = tmp_path / "raw.json"
    blocker = tmp_path / "raw.shard1of2.json"
    blocker.mkdir()
    capfd.readouterr()
    code = eval_video_llm.main(args(tiny, demo_video_dir, out, "--data_parallel", "2", "--max_samples", "8"))
    err = capfd.readouterr().err
    assert code == 2 and not out.exists()
    lines = [line for line in err.splitlines() if " ERROR " in line and "--data_parallel 2" in line]
    assert len(lines) == 1, err
    assert "worker 1 (shard 1 of 2, CUDA_VISIBLE_DEVICES=1) exited 2" in lines[0] and "rerun the same command" in lines[0]
    assert "Traceback" not in err
    shard0 = tmp_path / "raw.shard0of2.json"
    finished = shard0.read_bytes()
    assert len(json.loads(finished)["individual_results"]) > 0
    blocker.rmdir()
    assert eval_video_llm.main(args(tiny, demo_video_dir, out, "--data_parallel", "2", "--max_samples", "8")) == EXIT_OK
    assert shard0.read_bytes() == finished  # reused, not redone
    recs = json.loads(out.read_text())["individual_results"]
    assert sorted(r["idx"] for r in recs) == list(range(8)) and not any(r.get("error") for r in recs)
    assert not any(checkpoint_path(tmp_path / f"raw.shard{i}of2.json").exists() for i in range(2))


def test_the_launchers_redo_sets_changed_shards_aside_before_the_workers_start(demo_video_dir, tmp_path, monkeypatch):
    """Shard files made with other settings are moved aside (redo_changed, the launcher's mode) before any worker
    starts: the workers run from the command line, which would refuse them."""
    from k9bench.inference import stage as inference_stage
    from k9bench.inference.data_parallel import set_aside_changed_shards
    from k9bench.inference.stage import InferenceStage, config_from_argv
    from tests.test_inference_units import FakeBackend, args_for

    monkeypatch.setattr(inference_stage, "create_backend", lambda config: FakeBackend())
    out = tmp_path / "raw.json"
    for i in range(2):
        assert eval_video_llm.main(args_for(demo_video_dir, out, "--num_shards", "2", "--shard_id", str(i))) == EXIT_OK
    same = args_for(demo_video_dir, out, "--data_parallel", "2")
    set_aside_changed_shards(InferenceStage(config_from_argv(same), same, redo_changed=True))
    assert not [p for p in tmp_path.iterdir() if ".replaced-" in p.name]  # same settings: kept
    changed = same + ["--max_new_tokens", "7"]
    set_aside_changed_shards(InferenceStage(config_from_argv(changed), changed, redo_changed=True))
    assert sorted(p.name.split(".replaced-")[0] for p in tmp_path.iterdir() if ".replaced-" in p.name) == \
        ["raw.shard0of2.json", "raw.shard1of2.json"]
    assert not (tmp_path / "raw.shard0of2.json").exists()


def test_sigterm_reaches_the_workers_who_keep_their_checkpoints(tiny, demo_video_dir, tmp_path, repo_root):
    """SLURM's SIGTERM to the parent is passed on: every worker saves its checkpoint, the run exits 75, and the
    rerun of the same command finishes with every question once."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "raw.json"
    argv = args(tiny, demo_video_dir, out, "--data_parallel", "2")
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", K9BENCH_NO_PROGRESS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.Popen([sys.executable, str(repo_root / "eval_video_llm.py"), *argv], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    parts = [checkpoint_path(tmp_path / f"raw.shard{i}of2.json") for i in range(2)]
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if any(p.exists() and p.read_bytes().count(b"\n") >= 1 for p in parts):
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.01)
        proc.wait(timeout=120)
    finally:
        stderr = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
    assert proc.returncode == 75, stderr[-3000:]
    assert not out.exists() and "Traceback" not in stderr
    kept = sum(p.read_bytes().count(b"\n") for p in parts if p.exists())
    assert kept >= 1
    assert eval_video_llm.main(argv) == EXIT_OK
    assert sorted(r["idx"] for r in json.loads(out.read_text())["individual_results"]) == list(range(12))
