"""Issue 15 for eval_video_llm.py: every bad input refused before the model loads (exit 2, one line
naming the culprit, no traceback, nothing written, earlier outputs unchanged); no secret written;
a reply that is not text is a failed record with a clear reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference import stage as inference_stage
from k9bench.inference.runner import EXIT_BACKEND, EXIT_OK, EXIT_USAGE
from tests.fake_openai_server import FakeOpenAIServer, Reply, fake_openai  # noqa: F401
from tests.test_inference_units import FakeBackend

REPO = Path(__file__).resolve().parent.parent
SECRET = "sk-canary-inference-0123456789abcdef"


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if " ERROR " in line or ": error: " in line]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def no_model_load(monkeypatch):
    """Fails the test if the run gets as far as creating a backend (loading a model)."""
    created = []

    def create(config):
        created.append(config)
        raise AssertionError("the model was loaded before the bad input was refused")

    monkeypatch.setattr(inference_stage, "create_backend", create)
    return created


def base(video_dir: Path, out: Path | str, *extra: str) -> list[str]:
    return ["--dataset_name", "demo", "--video_dir", str(video_dir), "--max_frames", "4", "--output_file", str(out), "-q", *extra]


def _dataset_file(folder: Path) -> str:
    from k9bench.data.demo import demo_rows

    path = folder / "questions.json"
    path.write_text(json.dumps(demo_rows()))
    return str(path)


CASES = [
    # (id, extra flags (OUT/DATASET/FILE substituted), exit code, words the one error line must hold)
    ("output under a file", ["--output_file", "/etc/passwd/raw.json"], EXIT_USAGE, ["/etc/passwd", "not a folder"]),
    ("output in a folder nobody may write", ["--output_file", "/sys/raw.json"], EXIT_USAGE, ["/sys", "not writable"]),
    ("output is a folder", ["--output_file", "DIR"], EXIT_USAGE, ["is a folder"]),
    ("output is the input", ["--dataset_name", "DATASET", "--output_file", "DATASET"], EXIT_USAGE, ["is the input"]),
    ("fps inf", ["--fps", "inf"], EXIT_USAGE, ["--fps", "inf"]),
    ("fps nan", ["--fps", "nan"], EXIT_USAGE, ["--fps", "nan"]),
    ("negative end_idx", ["--end_idx", "-10"], EXIT_USAGE, ["--end_idx", "-10"]),
    ("end_idx before start_idx", ["--start_idx", "5", "--end_idx", "5"], EXIT_USAGE, ["--end_idx", "--start_idx"]),
    ("max_samples below -1", ["--max_samples", "-5"], EXIT_USAGE, ["--max_samples", "-5"]),
    ("one frame", ["--max_frames", "1"], EXIT_USAGE, ["--max_frames"]),
    ("temperature nan", ["--temperature", "nan"], EXIT_USAGE, ["--temperature"]),
    ("a local model folder that does not exist", ["--model_name_or_path", "./nomodel"], EXIT_BACKEND, ["./nomodel", "no such folder"]),
    ("a model path that is a file", ["--model_name_or_path", "FILE"], EXIT_BACKEND, ["not a folder"]),
    ("frame cache under a file", ["--frame_cache_dir", "/etc/passwd/cache"], EXIT_USAGE, ["--frame_cache_dir", "/etc/passwd"]),
    ("user-turn instructions with a system turn", ["--instructions_in_user_turn"], EXIT_USAGE, ["--instructions_in_user_turn"]),
    ("batch size neither a number nor auto", ["--batch_size", "many"], EXIT_USAGE, ["--batch_size", "many", "auto"]),
    ("batch size 0", ["--batch_size", "0"], EXIT_USAGE, ["--batch_size", ">= 1"]),
    ("audio in text-only mode", ["--audio", "--max_frames", "0"], EXIT_USAGE, ["--audio", "--max_frames 0"]),
    ("audio format unknown", ["--audio", "--audio_format", "flac"], EXIT_USAGE, ["--audio_format", "flac"]),
    # issue 23: bounds before work, stated in --help
    ("min_pixels above max_pixels", ["--min_pixels", "20000", "--max_pixels", "10000"], EXIT_USAGE, ["--min_pixels 20000", "--max_pixels 10000"]),
    ("absurd min_pixels", ["--min_pixels", "99999999999"], EXIT_USAGE, ["--min_pixels", "99999999999"]),
    ("seed 2**64", ["--seed", str(2**64)], EXIT_USAGE, ["--seed", str(2**64), "4294967295"]),
    ("negative seed", ["--seed", "-1"], EXIT_USAGE, ["--seed", "-1"]),
    ("max_new_tokens 1e12", ["--max_new_tokens", "1000000000000"], EXIT_USAGE, ["--max_new_tokens", "131072"]),
    ("max_new_tokens above the model's context", ["--model_name_or_path", "MODEL", "--max_new_tokens", "10000"], EXIT_USAGE,
     ["--max_new_tokens 10000", "8192 tokens"]),
    ("audio on a video-only model", ["--model_name_or_path", "MODEL", "--audio"], EXIT_USAGE, ["--audio", "qwen3_vl"]),
    ("frame size 60000x60000", ["--frame_size", "60000x60000"], EXIT_USAGE, ["--frame_size", "4096"]),
    ("max_samples 0", ["--max_samples", "0"], EXIT_USAGE, ["--max_samples", "0"]),
    ("device bogus, refused at parse time naming the flag", ["--device", "bogus"], EXIT_USAGE,
     ["argument --device", "bogus", "auto, cpu, cuda, cuda:N or mps"]),
    ("a split the demo set does not have", ["--split", "bogus"], EXIT_USAGE, ["--split bogus", "demo"]),
    ("a split of a single file", ["--dataset_name", "DATASET", "--split", "bogus"], EXIT_USAGE, ["--split bogus", "no splits"]),
    # issue 25: a wrong --video_dir costs no model load
    ("a video folder holding none of the videos", ["--video_dir", "DIR"], EXIT_USAGE, ["--video_dir", "holds none of the 3 video(s)"]),
    ("data_parallel with num_shards", ["--data_parallel", "2", "--num_shards", "2"], EXIT_USAGE, ["--data_parallel 2", "--num_shards 2"]),
    ("data_parallel 0", ["--data_parallel", "0"], EXIT_USAGE, ["--data_parallel", "0"]),
    # --device/--device_map/--max_memory together: a usage error before the model loads (not exit 3 at load)
    ("max_memory without device_map", ["--max_memory", "cpu=1GB"], EXIT_USAGE, ["--max_memory needs --device_map"]),
    ("device with device_map", ["--device", "cpu", "--device_map", "auto"], EXIT_USAGE,
     ["--device cpu and --device_map auto", "give one of them"]),
    ("no video there, with workers: refused before any worker starts", ["--data_parallel", "2", "--video_dir", "DIR"], EXIT_USAGE,
     ["--video_dir", "holds none of the 3 video(s)"]),
]


@pytest.mark.parametrize("extra, code, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_before_the_model_loads(no_model_load, demo_video_dir, tmp_path, capfd, extra, code, words):
    work = tmp_path / "work"
    work.mkdir()
    (work / "DIR").mkdir()
    (work / "FILE").write_text("not a model")
    dataset = _dataset_file(work)
    earlier = work / "earlier.json"
    earlier.write_text('{"individual_results": []}')
    model = work / "MODEL"  # a video-only model whose config is here (no weights: they must never be needed)
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "text_config": {"max_position_embeddings": 8192}}))
    before = snapshot(work)
    subst = {"DIR": str(work / "DIR"), "FILE": str(work / "FILE"), "DATASET": dataset, "MODEL": str(model)}
    argv = base(demo_video_dir, work / "raw.json", *[subst.get(a, a) for a in extra])
    capfd.readouterr()
    assert eval_video_llm.main(argv) == code
    err = capfd.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert all(word in lines[0] for word in words), lines
    assert "Traceback" not in err
    assert not no_model_load  # refused before any model load
    assert snapshot(work) == before  # nothing written, earlier outputs unchanged


@pytest.mark.parametrize("content, words", [
    (b"Watch the video.\n\xff\xfe caf\xe9\n", ["not UTF-8", "0xff", "offset 17"]),
    (b"", ["the file is empty"]),
    (None, ["is a folder"]),
], ids=["not UTF-8", "empty", "a folder"])
def test_a_system_prompt_file_that_cannot_be_the_prompt_is_one_line(no_model_load, demo_video_dir, tmp_path, capfd, content, words):
    """Issue 23: a non-UTF-8 (or empty, or folder) --system_prompt_file is one line naming the flag and the file, exit 2."""
    prompt = tmp_path / "prompt.txt"
    if content is None:
        prompt.mkdir()
    else:
        prompt.write_bytes(content)
    out = tmp_path / "raw.json"
    capfd.readouterr()
    assert eval_video_llm.main(base(demo_video_dir, out, "--system_prompt_file", str(prompt))) == EXIT_USAGE
    err = capfd.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1 and f"--system_prompt_file {prompt}" in lines[0] and all(w in lines[0] for w in words), err
    assert "Traceback" not in err and not no_model_load and not out.exists()


def test_a_system_prompt_file_is_read_verbatim(tmp_path):
    """Line endings and trailing white space are kept as the bytes say (no newline translation)."""
    from k9bench.prompts import load_prompt

    prompt = tmp_path / "p.txt"
    prompt.write_bytes("Regarde la vidéo.\r\nRéponds en JSON.  \r\n".encode("utf-8"))
    assert load_prompt("system_prompt", prompt) == ("Regarde la vidéo.\r\nRéponds en JSON.  \r\n", str(prompt))


def test_a_relative_model_path_whose_folder_exists_is_no_such_folder(no_model_load, demo_video_dir, tmp_path, capfd, monkeypatch):
    """Issue 25: ``demo_out/tiny-qwen3v`` with demo_out/ here is a mistyped local path, not a Hub id to download."""
    (tmp_path / "demo_out").mkdir()
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    assert eval_video_llm.main(base(demo_video_dir, tmp_path / "raw.json", "--model_name_or_path", "demo_out/tiny-qwen3v")) == EXIT_BACKEND
    err = capfd.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1 and "demo_out/tiny-qwen3v" in lines[0] and "no such folder" in lines[0] and "hf download" not in err
    assert not no_model_load and os.listdir(tmp_path) == ["demo_out"]


def test_a_second_run_on_the_same_output_is_refused_at_once(no_model_load, demo_video_dir, tmp_path, capfd):
    from k9bench.stage import output_lock

    out = tmp_path / "raw.json"
    with output_lock(out):
        capfd.readouterr()
        start = time.perf_counter()
        assert eval_video_llm.main(base(demo_video_dir, out)) == EXIT_USAGE
        assert time.perf_counter() - start < 5
    lines = error_lines(capfd.readouterr().err)
    assert len(lines) == 1 and f"pid {os.getpid()}" in lines[0] and str(out) in lines[0]
    assert not no_model_load and not out.exists()


def test_a_megabyte_question_is_a_failed_record_not_a_hang(demo_video_dir, tmp_path, monkeypatch):
    from k9bench.data.demo import demo_rows
    from k9bench.inference.planning import MAX_QUESTION_CHARS

    rows = demo_rows()[:3]
    rows[1]["question"] = "Why? " * 200_000  # 1 MB
    dataset = tmp_path / "q.json"
    dataset.write_text(json.dumps(rows))
    backend = FakeBackend()
    monkeypatch.setattr(inference_stage, "create_backend", lambda config: backend)
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(base(demo_video_dir, out, "--dataset_name", str(dataset))) == EXIT_OK
    recs = {r["idx"]: r for r in json.loads(out.read_text())["individual_results"]}
    long = recs[rows[1]["idx"]]
    assert long["error_class"] == "question_too_long" and str(MAX_QUESTION_CHARS) in long["error"] and long["response"] == ""
    assert backend.answered == 2 and [c for c in backend.calls if rows[1]["idx"] in c] == []  # never sent


def test_read_only_folder_as_another_user(tmp_path):
    """A folder without write permission, for a user the permission applies to (root ignores it)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    tmp_path.chmod(0o755)
    demote = None
    if os.geteuid() == 0:
        def demote():  # nobody
            os.setgid(65534)
            os.setuid(65534)
    env = dict(os.environ, K9BENCH_NO_PROGRESS="1", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", HOME=str(tmp_path))
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(REPO / "eval_video_llm.py"), "--dataset_name", "demo", "--output_file", str(ro / "raw.json")],
                              cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60, preexec_fn=demote)
    except PermissionError as exc:  # the interpreter is not readable by another user here (/sys/raw.json above covers root)
        pytest.skip(f"cannot run the script as another user here: {exc}")
    elapsed = time.perf_counter() - start
    if proc.returncode != EXIT_USAGE and "Permission denied" in proc.stderr and "eval_video_llm" not in proc.stderr:
        pytest.skip(f"cannot run the script as another user here: {proc.stderr[-200:]}")
    assert proc.returncode == EXIT_USAGE, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and str(ro) in lines[0] and "not writable" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and os.listdir(ro) == []
    assert elapsed < 10  # no model load, no dataset download


def test_the_script_exits_2_without_a_traceback(tmp_path):
    env = dict(os.environ, K9BENCH_NO_PROGRESS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, str(REPO / "eval_video_llm.py"), "--output_file", "/etc/passwd/raw.json"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_USAGE and "Traceback" not in proc.stderr
    assert len(error_lines(proc.stderr)) == 1 and "/etc/passwd" in proc.stderr
    assert os.listdir(tmp_path) == []


def test_a_secret_looking_unknown_flag_is_not_echoed(tmp_path, capfd):
    capfd.readouterr()
    assert eval_video_llm.main(["--api_key", SECRET, "--output_file", str(tmp_path / "raw.json")]) == EXIT_USAGE
    err = capfd.readouterr().err
    assert "unrecognized arguments: --api_key ***" in err and SECRET not in err
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- OpenAI backend


def openai_args(server, out: Path, *extra: str) -> list[str]:
    return ["--backend", "openai", "--api_model", "gpt-test", "--base_url", server.base_url, "--dataset_name", "demo",
            "--max_frames", "0", "--max_samples", "2", "--max_retries", "0", "--output_file", str(out), "-q", *extra]


def test_a_key_inside_extra_body_is_written_nowhere(fake_openai, tmp_path, monkeypatch, capfd):  # noqa: F811
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-real-key-0123456789")
    out = tmp_path / "raw.json"
    body = json.dumps({"api_key": SECRET, "chat_template_kwargs": {"enable_thinking": False}})
    assert eval_video_llm.main(openai_args(fake_openai, out, "--extra_body", body)) == EXIT_OK
    # the server got it (it was asked for), the artifact and the log did not
    assert any(SECRET in json.dumps(r.body) for r in fake_openai.chat_requests())
    text = out.read_text()
    assert SECRET not in text and "sk-the-real-key-0123456789" not in text
    data = json.loads(text)
    rec = data["individual_results"][0]
    assert rec["run_settings"]["request_params"]["extra_body"]["api_key"] == "***"
    assert rec["run_settings"]["request_params"]["extra_body"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert data["inference"]["backend_settings"]["extra_body"]["api_key"] == "***"
    assert SECRET not in capfd.readouterr().err


def test_reply_content_that_is_not_text_is_a_failed_record(fake_openai, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    replies = iter([Reply(text=7, completion_tokens=1), Reply(text='{"answer": "Sits."}')])  # type: ignore[arg-type]
    fake_openai.responder = lambda request: next(replies)
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(openai_args(fake_openai, out, "--concurrency", "1")) == EXIT_OK
    recs = json.loads(out.read_text())["individual_results"]
    failed = [r for r in recs if r.get("error")]
    assert len(failed) == 1 and "not text" in failed[0]["error"] and "int" in failed[0]["error"]
    assert "has no attribute" not in failed[0]["error"]
    assert [r["answer"] for r in recs if not r.get("error")] == ["Sits."]


def test_a_full_disk_during_a_checkpoint_append_is_one_line_and_the_rerun_resumes(demo_video_dir, tmp_path, monkeypatch, capfd):
    """Issue 23: ENOSPC on the 4th checkpoint line: one line naming the file and the free space, exit 1, the 3
    finished records valid on disk; the rerun answers only the other 9."""
    import errno

    from k9bench.layout import checkpoint_path

    out = tmp_path / "raw.json"
    part = checkpoint_path(out)
    real_write = os.write
    lines_written = []

    def write(fd, data):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target == str(part):
            if len(lines_written) == 3:
                raise OSError(errno.ENOSPC, "No space left on device")
            lines_written.append(bytes(data))
        return real_write(fd, data)

    backend = FakeBackend()
    monkeypatch.setattr(inference_stage, "create_backend", lambda config: backend)
    monkeypatch.setattr(os, "write", write)
    capfd.readouterr()
    assert eval_video_llm.main(base(demo_video_dir, out, "--batch_size", "1")) == 1
    monkeypatch.setattr(os, "write", real_write)
    err = capfd.readouterr().err
    lines = error_lines(err)
    assert len(lines) == 1 and str(part) in lines[0] and "no space left" in lines[0] and "free" in lines[0], err
    assert "Traceback" not in err and not out.exists()
    assert [json.loads(line)["idx"] for line in part.read_text().splitlines()] == [0, 1, 2]
    backend = FakeBackend()
    monkeypatch.setattr(inference_stage, "create_backend", lambda config: backend)
    assert eval_video_llm.main(base(demo_video_dir, out, "--batch_size", "1")) == EXIT_OK
    assert backend.answered == 9 and sorted(r["idx"] for r in json.loads(out.read_text())["individual_results"]) == list(range(12))


# --------------------------------------------------------------------------- issue 31 item 3


def test_a_resume_whose_pending_questions_are_a_missing_videos_finishes(demo_video_dir, tmp_path, monkeypatch, capfd):
    """Issue 31 item 3: a run over a folder missing one video, stopped before that video's questions, left only
    them pending; the rerun was refused ("holds none of the 1 video(s)") forever. The folder is judged by the
    whole run's videos: the rerun finishes, with failed records (missing_video) for those questions only."""
    import shutil

    from k9bench.layout import checkpoint_path
    from k9bench.data.demo import demo_rows

    videos = tmp_path / "videos"
    shutil.copytree(demo_video_dir, videos)
    last_scene = demo_rows()[-1]["video"] if "video" in demo_rows()[-1] else None
    out = tmp_path / "raw.json"
    backend = FakeBackend()
    monkeypatch.setattr(inference_stage, "create_backend", lambda config: backend)
    assert eval_video_llm.main(base(videos, out, "--batch_size", "1")) == EXIT_OK
    records = json.loads(out.read_text())["individual_results"]
    missing = last_scene or records[-1]["video"]
    mine = [r for r in records if r["video"] == missing]
    assert mine and len(mine) < len(records)
    (videos / missing).unlink()
    # the state of a run stopped (a kill, a full disk) after every question whose video is there
    part = checkpoint_path(out)
    part.write_text("".join(json.dumps(r) + "\n" for r in records if r["video"] != missing))
    out.unlink()
    backend = FakeBackend()
    monkeypatch.setattr(inference_stage, "create_backend", lambda config: backend)
    capfd.readouterr()
    assert eval_video_llm.main(base(videos, out, "--batch_size", "1")) == EXIT_OK, capfd.readouterr().err
    assert backend.answered == 0
    again = {r["idx"]: r for r in json.loads(out.read_text())["individual_results"]}
    assert sorted(again) == sorted(r["idx"] for r in records)  # nothing lost
    assert {i for i, r in again.items() if r.get("error")} == {r["idx"] for r in mine}
    assert all("missing" in json.dumps(again[r["idx"]]).lower() or "not found" in again[r["idx"]]["error"].lower() for r in mine)
    # a folder that holds none of the run's videos is still refused at once
    empty = tmp_path / "empty"
    empty.mkdir()
    assert eval_video_llm.main(base(empty, tmp_path / "other.json")) == EXIT_USAGE
    assert "holds none of the 3 video(s)" in capfd.readouterr().err


def test_an_empty_base_url_without_a_key_names_the_missing_key(tmp_path, monkeypatch, capfd):
    """Issue 31 item 3: `--base_url ""` (a script's unset variable) with no OPENAI_API_KEY said "expected an http://
    URL ... got ''"; it names the missing key now (exit 2, one line, before anything is read)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    try:
        code = eval_video_llm.main(["--backend", "openai", "--api_model", "gpt-test", "--base_url", "", "--dataset_name", "demo",
                                    "--output_file", str(tmp_path / "raw.json")])
    except SystemExit as exc:  # argparse's own exit
        code = exc.code
    err = capfd.readouterr().err
    assert code == EXIT_USAGE
    lines = error_lines(err)
    assert len(lines) == 1 and "--base_url" in lines[0] and "OPENAI_API_KEY is not set" in lines[0], err
    assert os.listdir(tmp_path) == []


TORCH_FREE = [
    # (id, flags, env, words): refusals that are sure without torch, said before its import (issue 31 item 3)
    ("cuda:7 with every GPU hidden", ["--device", "cuda:7"], {"CUDA_VISIBLE_DEVICES": ""}, ["--device cuda:7", "no CUDA device"]),
    ("cuda:7 beyond the GPUs listed", ["--device", "cuda:7"], {"CUDA_VISIBLE_DEVICES": "0,1"}, ["--device cuda:7", "at most 2"]),
    ("mps off macOS", ["--device", "mps"], {}, ["--device mps", "macOS"]),
    ("flash_attention_2 on cpu", ["--device", "cpu", "--attn_implementation", "flash_attention_2"], {},
     ["flash_attention_2", "needs a CUDA GPU (device is cpu)"]),
    ("flash_attention_2 with every GPU hidden", ["--attn_implementation", "flash_attention_2"], {"CUDA_VISIBLE_DEVICES": "-1"},
     ["flash_attention_2", "needs a CUDA GPU"]),
]


@pytest.mark.parametrize("extra, env, words", [c[1:] for c in TORCH_FREE], ids=[c[0] for c in TORCH_FREE])
def test_checks_that_need_no_torch_come_before_it(no_model_load, tiny_model_dir, demo_video_dir, tmp_path, capfd, monkeypatch,
                                                   extra, env, words):
    import k9bench.models.accelerator as acc

    if "mps" in extra and sys.platform == "darwin":
        pytest.skip("macOS has MPS")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if env.get("CUDA_VISIBLE_DEVICES", "").strip() not in ("", "-1"):  # a machine whose GPU driver is there
        monkeypatch.setattr(acc, "_GPU_DRIVER_MARKERS", (str(tmp_path),))

    def no_torch(*args, **kwargs):
        raise AssertionError("torch was asked (resolve_device/resolve_attention) before the refusal")

    monkeypatch.setattr(acc, "resolve_device", no_torch)
    monkeypatch.setattr(acc, "resolve_attention", no_torch)
    out = tmp_path / "raw.json"
    code = eval_video_llm.main(base(demo_video_dir, out, "--model_name_or_path", str(tiny_model_dir), *extra))
    err = capfd.readouterr().err
    assert code == EXIT_USAGE, err
    lines = error_lines(err)
    assert len(lines) == 1 and all(w in lines[0] for w in words), err
    assert not no_model_load and not out.exists()


def test_an_empty_model_folder_is_refused_before_the_model_loads(no_model_load, demo_video_dir, tmp_path, capfd, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)
    for name in ("empty", "./empty"):  # a bare name that is a folder here is what transformers loads
        code = eval_video_llm.main(base(demo_video_dir, tmp_path / "raw.json", "--model_name_or_path", name))
        lines = error_lines(capfd.readouterr().err)
        assert code == EXIT_BACKEND and len(lines) == 1 and f"--model_name_or_path {name}" in lines[0] and "no config.json" in lines[0]
    assert not no_model_load


@pytest.mark.parametrize("extra", [["--device", "cuda:7"], ["--attn_implementation", "flash_attention_2"],
                                   ["--model_name_or_path", "EMPTY"]], ids=["cuda:7", "flash_attention_2", "empty model folder"])
def test_the_script_refuses_without_importing_torch(tmp_path, extra):
    """The real script in a fresh process (no GPU visible): one line, well under the ~10 s `import torch` takes."""
    (tmp_path / "empty").mkdir()
    model = [] if "EMPTY" in extra else ["--model_name_or_path", "org/model"]
    argv = [a.replace("EMPTY", str(tmp_path / "empty")) for a in extra]
    code = ("import runpy, sys; sys.argv = sys.argv[1:]\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "finally:\n    print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "eval_video_llm.py"), "--dataset_name", "demo", "--max_frames", "0",
                           "--output_file", str(tmp_path / "raw.json"), "-q", *model, *argv],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"})
    took = time.monotonic() - started
    assert proc.returncode in (EXIT_USAGE, EXIT_BACKEND), proc.stderr
    assert len(error_lines(proc.stderr)) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.strip().endswith("NO-TORCH"), proc.stdout
    assert took < 10
