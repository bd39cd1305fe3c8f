"""The inference loop with a scripted fake backend: OOM retry, batch fallback, signals, sharding,
resume checks, auto-download, and the small planning helpers. No model is loaded."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.layout import checkpoint_path
from k9bench.data.dataset import load_questions
from k9bench.inference import planning, registry
from k9bench.inference import records as records_module
from k9bench.inference import stage as inference_stage
from k9bench.inference.backend import Backend, BackendError, GenerationOutput, backend_class
from k9bench.inference.planning import (
    EXIT_BACKEND,
    build_messages,
    chunks,
    default_output_file,
    group_by_video,
    shard_groups,
    shard_output_file,
)
from k9bench.inference.runner import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE


class FakeOOM(RuntimeError):
    pass


class FakeBackend(Backend):
    """Answers from a script; can raise OOM above a frame count, fail chosen questions, or signal itself."""

    name = "fake"

    def __init__(self, oom_above: int | None = None, fail_questions: tuple = (), signal_after: int | None = None):
        self.oom_above = oom_above
        self.fail_questions = fail_questions
        self.signal_after = signal_after
        self.calls: list[list[int]] = []
        self.recovered = 0
        self.recovered_inside_except = 0
        self.answered = 0

    def load(self) -> None:
        pass

    def render_prompt(self, messages):
        return json.dumps(messages, sort_keys=True)

    def generate(self, batch):
        self.calls.append([r.key for r in batch])
        frames = batch[0].frames
        if self.oom_above is not None and frames is not None and frames.num_frames > self.oom_above:
            raise FakeOOM("CUDA out of memory (fake)")
        outs = []
        for r in batch:
            text = r.messages[-1]["content"][-1]["text"]
            if any(f in text for f in self.fail_questions):
                raise ValueError(f"cannot answer {text!r}")
            n = frames.num_frames if frames is not None else 0
            outs.append(GenerationOutput(text=json.dumps({"reasoning": "r", "answer": f"{r.key}:{n}"}), prompt=self.render_prompt(r.messages),
                                         num_input_tokens=10, num_output_tokens=5, finish_reason="stop"))
        self.answered += len(outs)
        if self.signal_after is not None and self.answered >= self.signal_after:
            os.kill(os.getpid(), getattr(self, "signal_number", signal.SIGUSR1))
        return outs

    def describe(self):
        return {"name": "fake", "generation": {"do_sample": False, "max_new_tokens": 2048}, "attn_implementation": "none", "warnings": []}

    def frame_patch_size(self):
        return 16

    def is_out_of_memory(self, exc):
        return isinstance(exc, FakeOOM)

    def recover_from_out_of_memory(self):
        import sys

        self.recovered += 1
        # called while an exception is being handled, its traceback would still hold the failed
        # generate's tensors, and emptying the CUDA cache could not free them
        self.recovered_inside_except += sys.exc_info()[0] is not None

    def close(self):
        pass


@pytest.fixture
def use_backend(monkeypatch):
    def _install(backend):
        monkeypatch.setattr(inference_stage, "create_backend", lambda config: backend)
        return backend

    return _install


def args_for(video_dir: Path, out: Path, *extra: str) -> list[str]:
    return ["--dataset_name", "demo", "--video_dir", str(video_dir), "--max_frames", "8", "--max_pixels", "16384",
            "--min_pixels", "2048", "--output_file", str(out), "-q", *extra]


def records(path: Path) -> dict:
    return {r["idx"]: r for r in json.loads(path.read_text())["individual_results"]}


def test_fake_backend_satisfies_protocol():
    assert isinstance(FakeBackend(), Backend)


def test_oom_retried_once_at_half_frames(use_backend, demo_video_dir, tmp_path):
    backend = use_backend(FakeBackend(oom_above=4))
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "4")) == EXIT_OK
    recs = records(out)
    assert len(recs) == 12 and not any("error" in r for r in recs.values())
    retried = [r for r in recs.values() if "oom_retry" in r]
    assert {r["scene_name"] for r in retried} == {"demoVid0001", "demoVid0003"}  # demoVid0002 has only 4 frames
    for r in retried:
        retry = r["oom_retry"]
        assert retry["retried"] is True and retry["retry_num_frames"] <= retry["original_num_frames"] // 2
        assert r["num_frames"] == retry["retry_num_frames"] == len(r["frame_indices"])
        assert r["answer"] == f"{r['idx']}:{r['num_frames']}" and r["answer_extraction"] == "json"
    assert backend.recovered >= len(retried) == 8
    assert backend.recovered_inside_except == 0
    assert json.loads(out.read_text())["run_stats"]["oom_retries"] == 8
    # the per-video records give the frames sampled at the run's settings, not the retry's half
    videos = {v["scene_name"]: v for v in json.loads(out.read_text())["videos"]}
    for r in retried:
        assert videos[r["scene_name"]]["frames_sampled"] == r["oom_retry"]["original_num_frames"]


def test_oom_twice_is_a_failed_record(use_backend, demo_video_dir, tmp_path):
    backend = use_backend(FakeBackend(oom_above=0))
    out = tmp_path / "raw.json"
    # every question failed, so the run reports an error (the file is still written for inspection)
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "2")) == EXIT_ERROR
    for r in records(out).values():
        assert r["error_class"] == "oom" and "out of memory" in r["error"]
        assert r["oom_retry"]["retried"] is True and r["response"] == ""
    assert backend.recovered == 4 and backend.recovered_inside_except == 0


def test_failed_batch_is_rerun_question_by_question(use_backend, demo_video_dir, tmp_path):
    rows = load_questions("demo").questions
    bad = rows[1].question
    backend = use_backend(FakeBackend(fail_questions=(bad,)))
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "4")) == EXIT_OK
    recs = records(out)
    assert recs[rows[1].idx]["error_class"] == "generation_error" and "cannot answer" in recs[rows[1].idx]["error"]
    assert recs[rows[1].idx]["prompt"]  # a failed record still shows its prompt
    assert sum("error" in r for r in recs.values()) == 1
    assert any(len(c) == 1 for c in backend.calls) and any(len(c) > 1 for c in backend.calls)


def test_sigusr1_stops_cleanly_and_rerun_resumes(use_backend, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    use_backend(FakeBackend(signal_after=5))
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "1")) == EXIT_INTERRUPTED
    assert not out.exists()
    lines = checkpoint_path(out).read_text().splitlines()
    assert len(lines) == 4  # the signal lands inside the 5th generate call, which is abandoned
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handlers restored
    backend = use_backend(FakeBackend())
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "1")) == EXIT_OK
    assert sorted(records(out)) == list(range(12))
    assert backend.answered == 8  # only the missing ones
    assert not checkpoint_path(out).exists()


def test_failed_records_retried_on_rerun_unless_asked(use_backend, demo_video_dir, tmp_path, capfd):
    video_dir = tmp_path / "videos"
    video_dir.mkdir()
    out = tmp_path / "raw.json"
    backend = use_backend(FakeBackend())
    # none of the videos there: refused before the model loads, nothing written (issue 25)
    capfd.readouterr()
    assert eval_video_llm.main(args_for(video_dir, out, "--max_samples", "3")) == EXIT_USAGE
    assert "holds none of the 1 video(s)" in capfd.readouterr().err and os.listdir(tmp_path) == ["videos"]
    os.symlink(demo_video_dir / "demoVid0001.mp4", video_dir / "demoVid0001.mp4")
    # two of the three videos missing: their questions are failed records, the run goes on
    assert eval_video_llm.main(args_for(video_dir, out)) == EXIT_OK
    missing = {idx for idx, r in records(out).items() if r.get("error_class") == "missing_video"}
    assert len(missing) == 8 and backend.answered == 4
    for name in os.listdir(demo_video_dir):
        if not (video_dir / name).exists():
            os.symlink(demo_video_dir / name, video_dir / name)
    assert eval_video_llm.main(args_for(video_dir, out, "--no_retry_failed")) == EXIT_OK
    assert {idx for idx, r in records(out).items() if r.get("error")} == missing and backend.answered == 4
    assert eval_video_llm.main(args_for(video_dir, out)) == EXIT_OK
    assert not any("error" in r for r in records(out).values()) and backend.answered == 12


def test_checkpoint_from_another_frame_budget_is_refused(use_backend, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    checkpoint_path(out).write_text(json.dumps({"idx": 0, "model_name": "Qwen3-VL-4B-Instruct", "max_frames": 32}) + "\n")
    use_backend(FakeBackend())
    assert eval_video_llm.main(args_for(demo_video_dir, out)) == EXIT_USAGE


def test_sharded_runs_cover_everything_once(use_backend, demo_video_dir, tmp_path):
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    seen = {}
    for shard in range(2):
        assert eval_video_llm.main(args_for(demo_video_dir, out, "--num_shards", "2", "--shard_id", str(shard))) == EXIT_OK
        path = tmp_path / f"raw.shard{shard}of2.json"
        data = json.loads(path.read_text())
        assert (data["num_shards"], data["shard_id"]) == (2, shard)
        for idx, r in records(path).items():
            assert idx not in seen
            seen[idx] = r["scene_name"]
    assert sorted(seen) == list(range(12))
    assert not out.exists()


def test_auto_download_passes_every_video_of_the_pending_questions(use_backend, demo_video_dir, tmp_path, monkeypatch):
    """The downloader gets every video of the questions still to run (it skips a verified file and replaces a
    corrupt one), with the demo set's local generators, cookies and workers."""
    import k9bench.download.stage as download

    video_dir = tmp_path / "videos"
    video_dir.mkdir()
    os.symlink(demo_video_dir / "demoVid0001.mp4", video_dir / "demoVid0001.mp4")
    asked = {}

    class Report:
        counts = {"ok": 1, "skipped": 0, "failed": 1}
        failed = [type("R", (), {"scene_name": "demoVid0003", "error_class": "unavailable", "message": "gone"})()]

        def summary_line(self):
            return "1 ok, 1 failed"

    def fake_download(videos, output_dir, config=None, **kw):
        asked.update(videos)
        asked["_config"] = config
        asked["_generators"] = sorted(kw.get("generators") or {})
        os.symlink(demo_video_dir / "demoVid0002.mp4", Path(output_dir) / "demoVid0002.mp4")
        return Report()

    monkeypatch.setattr(download, "download_videos", fake_download)
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    cookies = tmp_path / "cookies.txt"
    assert eval_video_llm.main(args_for(video_dir, out, "--auto_download", "--download_cookies", str(cookies),
                                        "--download_workers", "2")) == EXIT_OK
    config = asked.pop("_config")
    assert config.cookies == str(cookies) and config.workers == 2  # download settings reach the downloader
    assert asked.pop("_generators") == ["demoVid0001", "demoVid0002", "demoVid0003"]  # the demo set is made locally
    assert sorted(asked) == ["demoVid0001", "demoVid0002", "demoVid0003"]  # the present one too: it may be corrupt
    assert all(url.startswith("https://") for url in asked.values())
    recs = records(out)
    assert {r["error_class"] for r in recs.values() if r["scene_name"] == "demoVid0003"} == {"missing_video"}
    assert not any("error" in r for r in recs.values() if r["scene_name"] != "demoVid0003")
    assert json.loads(out.read_text())["run_stats"]["auto_download"]["failed"] == {"demoVid0003": "unavailable: gone"}


@pytest.mark.parametrize(
    "extra",
    [["--batch_size", "0"], ["--num_shards", "2", "--shard_id", "2"], ["--max_frames", "-1"], ["--max_pixels", "100"],
     ["--system_prompt_file", "/nonexistent/prompt.txt"], ["--start_idx", "500"], ["--temperature", "-1"],
     ["--do_sample", "--temperature", "0"], ["--top_p", "0"], ["--top_p", "1.5"], ["--top_k", "-1"]],
)
def test_bad_input_exit_2(use_backend, demo_video_dir, tmp_path, extra):
    use_backend(FakeBackend())
    assert eval_video_llm.main(args_for(demo_video_dir, tmp_path / "raw.json", *extra)) == EXIT_USAGE
    assert not (tmp_path / "raw.json").exists()


def test_backend_load_failure_exit_3(demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--model_name_or_path", str(tmp_path / "no_model"))) == EXIT_BACKEND


def test_uncached_hub_model_offline_is_one_line_exit_3(demo_video_dir, tmp_path, monkeypatch, capfd):
    """An uncached Hub id while offline is refused before transformers loads anything, in one line."""
    import transformers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))

    def must_not_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", must_not_load)
    capfd.readouterr()
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--model_name_or_path", "someorg/not-cached-VL")) == EXIT_BACKEND
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "someorg/not-cached-VL" in err[0] and "Traceback" not in err[0]
    assert "tiny_model" in err[0] and "--model_name_or_path" in err[0]
    assert not out.exists()


def test_out_of_memory_while_loading_is_exit_3(demo_video_dir, tmp_path, monkeypatch, capfd):
    import transformers

    from k9bench.tiny_model import build_tiny_qwen3vl

    model = build_tiny_qwen3vl(tmp_path / "m")

    def no_memory(*args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(transformers.AutoModelForImageTextToText, "from_pretrained", no_memory)
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, tmp_path / "raw.json", "--model_name_or_path", str(model))) == EXIT_BACKEND
    err = capfd.readouterr().err
    assert "cannot load model" in err and "CUDA out of memory" in err


def test_system_prompt_file_and_user_turn_mode(use_backend, demo_video_dir, tmp_path):
    prompt = tmp_path / "p.txt"
    prompt.write_text("Custom prompt text.\n")
    use_backend(FakeBackend())
    out = tmp_path / "raw.json"
    # the instructions-in-the-user-turn variant has its own flag (--use_system_message False is the reference's empty system turn)
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "1", "--system_prompt_file", str(prompt),
                                        "--instructions_in_user_turn", "--use_system_message", "False")) == EXIT_OK
    data = json.loads(out.read_text())
    rec = data["individual_results"][0]
    messages = json.loads(rec["prompt"])
    assert [m["role"] for m in messages] == ["user"]
    assert messages[0]["content"][-1]["text"].startswith("Custom prompt text.\n\n\n")
    assert data["inference"]["prompt"]["system_prompt_source"] == str(prompt)
    assert data["inference"]["prompt"]["use_system_message"] is False


# --------------------------------------------------------------------------- helpers


def test_build_messages_shapes():
    msgs = build_messages("Q?", "SYS", "system", True)
    assert msgs == [{"role": "system", "content": [{"type": "text", "text": "SYS"}]},
                    {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Q?"}]}]
    assert build_messages("Q?", "SYS", "user_turn", False) == [{"role": "user", "content": [{"type": "text", "text": "SYS\n\nQ?"}]}]


def test_grouping_and_sharding_keep_videos_whole():
    qs = load_questions("demo").questions
    groups = group_by_video(qs, "v")
    assert [g.scene_name for g in groups] == ["demoVid0001", "demoVid0002", "demoVid0003"]
    assert sum(len(g.questions) for g in groups) == len(qs)
    assert groups[0].path == Path("v/demoVid0001.mp4")
    shards = [shard_groups(groups, 2, k) for k in range(2)]
    assert [g.scene_name for g in shards[0]] == ["demoVid0001", "demoVid0003"]
    assert [g.scene_name for g in shards[1]] == ["demoVid0002"]
    with pytest.raises(planning.UsageError):
        shard_groups(groups, 2, 2)


@pytest.mark.parametrize(
    "output, n, k, expected",
    [("raw.json", 1, 0, "raw.json"), ("raw.json", 4, 2, "raw.shard2of4.json"), ("d/raw", 2, 1, "d/raw.shard1of2.json"),
     ("raw.shard1of2.json", 2, 1, "raw.shard1of2.json")],
)
def test_shard_output_file(output, n, k, expected):
    assert shard_output_file(output, n, k) == Path(expected)


def test_default_output_file_is_the_launchers():
    assert default_output_file("Qwen/Qwen3-VL-4B-Instruct", 32, 10) == "raw_Qwen3-VL-4B-Instruct_mf32_n10.json"
    assert default_output_file("/models/my-model/", 0, -1) == "raw_my-model_mf0_n-1.json"


def test_a_hand_run_without_output_file_writes_under_eval_results(use_backend, demo_video_dir, tmp_path, monkeypatch):
    """Issue 25: the default raw file goes to eval_results/ (made when missing), not into the current folder."""
    monkeypatch.chdir(tmp_path)
    use_backend(FakeBackend())
    argv = [a for a in args_for(demo_video_dir, tmp_path / "unused.json", "--max_samples", "2") if a != str(tmp_path / "unused.json")]
    argv.remove("--output_file")
    assert eval_video_llm.main(argv) == EXIT_OK
    made = tmp_path / "eval_results" / "raw_Qwen3-VL-4B-Instruct_mf8_n2.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval_results"]
    assert sorted(records(made)) == [0, 1]


def test_chunks():
    assert list(chunks([1, 2, 3, 4, 5], 2)) == [[1, 2], [3, 4], [5]]


def test_backend_registry():
    assert backend_class("hf").__name__ == "HFBackend"
    assert set(registry.REGISTRY) >= {"hf", "openai"}
    with pytest.raises(BackendError):
        backend_class("nope")


def test_rerun_of_a_finished_run_changes_nothing_and_checkpoint_only_is_finalised(use_backend, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    use_backend(FakeBackend())
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "3")) == EXIT_OK
    first = out.read_bytes()
    backend = use_backend(FakeBackend())
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "3")) == EXIT_OK
    assert out.read_bytes() == first and backend.answered == 0
    # killed after the last checkpoint line but before the final write: the rerun only writes the file
    part = checkpoint_path(out)
    part.write_text("".join(json.dumps(r) + "\n" for r in json.loads(first)["individual_results"]))
    out.unlink()
    backend = use_backend(FakeBackend())
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "3")) == EXIT_OK
    assert backend.answered == 0 and not part.exists()
    assert [r["response"] for r in json.loads(out.read_text())["individual_results"]] == [r["response"] for r in json.loads(first)["individual_results"]]


@pytest.mark.parametrize(
    "changed, named",
    [(["--seed", "1"], "seed"), (["--fps", "2"], "run_settings.frames"), (["--use_system_message", "False"], "use_system_message"),
     (["--video_decoder", "pyav"], "run_settings.frames"), (["--system_prompt_file", "PROMPT"], "system_prompt_sha256")],
)
def test_resume_refuses_records_made_with_other_settings(use_backend, demo_video_dir, tmp_path, capfd, changed, named):
    out = tmp_path / "raw.json"
    use_backend(FakeBackend(signal_after=2))
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4")) == EXIT_INTERRUPTED
    part = checkpoint_path(out)
    before = part.read_bytes()
    assert before.count(b"\n") == 1
    rec = json.loads(before)
    assert rec["run_settings"]["frames"]["fps"] == 1.0 and rec["run_settings"]["backend"] == "fake"
    prompt = tmp_path / "p.txt"
    prompt.write_text("Another prompt.\n")
    changed = [str(prompt) if a == "PROMPT" else a for a in changed]
    backend = use_backend(FakeBackend())
    capfd.readouterr()
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4", *changed)) == EXIT_USAGE
    err = capfd.readouterr().err
    assert named in err and "idx 0" in err and str(part) in err
    assert backend.answered == 0 and part.read_bytes() == before and not out.exists()
    # the same flags resume, and a finished file refuses a rerun with other settings before any work
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4")) == EXIT_OK
    assert backend.answered == 3 and sorted(records(out)) == [0, 1, 2, 3]
    finished = out.read_bytes()
    for other in (["--seed", "7"], ["--max_new_tokens", "64"], ["--temperature", "0.5"], ["--fps", "2"]):
        assert eval_video_llm.main(args_for(demo_video_dir, out, "--max_samples", "4", *other)) == EXIT_USAGE, other
    assert out.read_bytes() == finished and backend.answered == 3


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR1"])
def test_sigterm_and_sigusr1_exit_75_with_records_kept(use_backend, demo_video_dir, tmp_path, sig):
    out = tmp_path / "raw.json"
    backend = use_backend(FakeBackend(signal_after=3))
    backend.signal_number = getattr(signal, sig)
    assert eval_video_llm.main(args_for(demo_video_dir, out, "--batch_size", "1")) == EXIT_INTERRUPTED
    assert not out.exists() and checkpoint_path(out).read_text().count("\n") == 2
    assert signal.getsignal(getattr(signal, sig)) is signal.SIG_DFL


def test_reply_cut_inside_opened_thinking_is_flagged():
    """A Thinking template opens <think> in the prompt; a reply cut before </think> is flagged, and counted."""
    q = load_questions("demo").questions[0]
    ctx = records_module.RunContext("m", 0, "SYS", True, 0, {}, None, True)
    prompt = "<|im_start|>assistant\n<think>\n"
    cut = records_module.make_record(q, ctx, output=GenerationOutput(text="The dog", prompt=prompt, finish_reason="length"))
    done = records_module.make_record(q, ctx, output=GenerationOutput(text='r</think>{"answer": "Sits."}', prompt=prompt))
    plain = records_module.make_record(q, ctx, output=GenerationOutput(text="The dog", prompt="<|im_start|>assistant\n"))
    assert (cut.answer, cut.extra["thinking_unfinished"]) == ("The dog", True)
    assert (done.answer, done.extra["thinking_unfinished"]) == ("Sits.", False)
    assert plain.extra["thinking_unfinished"] is False


def test_missing_video_dir_and_folder_output_are_bad_input(use_backend, demo_video_dir, tmp_path, capfd):
    backend = use_backend(FakeBackend())
    capfd.readouterr()
    assert eval_video_llm.main(args_for(tmp_path / "no_such_dir", tmp_path / "raw.json")) == EXIT_USAGE
    assert "--video_dir" in capfd.readouterr().err and not checkpoint_path(tmp_path / "raw.json").exists()
    (tmp_path / "out_dir").mkdir()
    assert eval_video_llm.main(args_for(demo_video_dir, tmp_path / "out_dir")) == EXIT_USAGE
    assert "is a folder" in capfd.readouterr().err and backend.answered == 0
    # text-only needs no video folder
    assert eval_video_llm.main(args_for(tmp_path / "no_such_dir", tmp_path / "t.json", "--max_frames", "0", "--max_samples", "1")) == EXIT_OK
