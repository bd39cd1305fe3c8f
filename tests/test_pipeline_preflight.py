"""The launcher's preflight (every stage checked before the first one runs, and by --dry_run), the shared
build products' locks, the step named on a signal, and the launcher's log lines (issues 28 and 31).
The stages are stand-ins (tests/pipeline_fakes.py)."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from k9bench.pipeline import main
from tests.pipeline_fakes import fake, launcher_env  # noqa: F401 (fixtures)


def launch(fake, capsys, *args: str) -> tuple[int, str, list[str]]:
    before = len(fake.calls)
    code = main(list(args))
    return code, capsys.readouterr().out, fake.names()[before:]


def errors(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if "ERROR" in ln]


def nothing_made(tmp_path: Path) -> bool:
    return not (tmp_path / "out").exists() and not (tmp_path / "videos").exists()


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry_run"])
def test_offline_uncached_embedding_model_is_refused_before_inference_in_seconds(fake, launcher_env, capsys, tmp_path,
                                                                                 monkeypatch, dry_run):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    launcher_env(EMBEDDING_MODEL="Qwen/Qwen3-Embedding-8B")
    started = time.monotonic()
    code, out, ran = launch(fake, capsys, *(["--dry_run"] if dry_run else []))
    assert code == 2 and ran == [], out
    assert time.monotonic() - started < 10
    (line,) = errors(out)
    assert "EMBEDDING_MODEL=Qwen/Qwen3-Embedding-8B" in line and "HF_HUB_OFFLINE" in line and "--embedding_model" not in line
    assert nothing_made(tmp_path) and not list(tmp_path.rglob("raw_*.json"))


def test_offline_uncached_model_is_refused_with_exit_2_naming_model_name(fake, launcher_env, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    launcher_env(MODEL_NAME="Qwen/Qwen3-VL-4B-Instruct")
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == [], out
    (line,) = errors(out)
    assert "MODEL_NAME=Qwen/Qwen3-VL-4B-Instruct: the model is not in the Hugging Face cache" in line and "OFFLINE" in line
    assert nothing_made(tmp_path)


def test_offline_uncached_hub_dataset_is_refused_naming_dataset_name(fake, launcher_env, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    launcher_env(DATASET_NAME="someone/k9bench-copy")
    code, out, ran = launch(fake, capsys, "--dry_run")
    assert code == 2 and ran == [], out
    assert "DATASET_NAME=someone/k9bench-copy: not in the Hugging Face cache" in errors(out)[0]


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry_run"])
def test_a_dataset_that_does_not_resolve_is_named_and_no_folder_is_created(fake, launcher_env, capsys, tmp_path, dry_run):
    launcher_env(DATASET_NAME="./nope_data")
    code, out, ran = launch(fake, capsys, *(["--dry_run"] if dry_run else []))
    assert code == 2 and ran == [], out
    (line,) = errors(out)
    assert "DATASET_NAME=./nope_data: no such file or folder" in line and "--dataset_name" not in line
    assert nothing_made(tmp_path)


def test_serve_vllm_without_vllm_is_refused_by_the_dry_run(fake, launcher_env, capsys, tmp_path, monkeypatch):
    missing = tmp_path / "novllm-python"
    missing.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'vllm'\" >&2\nexit 1\n")
    missing.chmod(0o755)
    monkeypatch.setenv("K9BENCH_VLLM_PYTHON", str(missing))
    launcher_env(SERVE="vllm")
    for args in (["--dry_run"], []):
        code, out, ran = launch(fake, capsys, *args)
        assert code == 2 and ran == [], out
        (line,) = errors(out)
        assert line.split("ERROR: ", 1)[1].startswith("SERVE=vllm: the vLLM environment, K9BENCH_VLLM_PYTHON=")
        assert "No module named 'vllm'" in line
    assert nothing_made(tmp_path)


def test_backend_vllm_without_vllm_in_this_python_is_refused_by_dry_run(fake, launcher_env, capsys, tmp_path, monkeypatch):
    """BACKEND=vllm runs the engine in the launcher's own python: that one must import vllm (its registry row's
    engine_module), and the line says to run the launcher from such an environment, not K9BENCH_VLLM_PYTHON."""
    python = tmp_path / "novllm-python"  # this python, as the launcher sees it: one without vllm
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'vllm'\" >&2\nexit 1\n")
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    launcher_env(BACKEND="vllm")
    for args in (["--dry_run"], []):
        code, out, ran = launch(fake, capsys, *args)
        assert code == 2 and ran == [], out
        (line,) = errors(out)
        assert line.split("ERROR: ", 1)[1].startswith(f"BACKEND=vllm: this python ({sys.executable})")
        assert "cannot import vllm (ModuleNotFoundError: No module named 'vllm')" in line
        assert "PYTHON=" in line and "K9BENCH_VLLM_PYTHON" not in line
    assert nothing_made(tmp_path)


def test_k9bench_vllm_python_is_in_the_help(fake, launcher_env, capsys):
    assert main(["--help"]) == 0
    assert "K9BENCH_VLLM_PYTHON" in capsys.readouterr().out


def test_an_unwritable_output_is_refused_before_any_stage(fake, launcher_env, capsys, tmp_path):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    launcher_env()
    code, out, ran = launch(fake, capsys, "--dry_run")  # the plan names the files: make the raw file a folder
    assert code == 0, out
    name = next(w for w in out.split() if "raw_" in w and w.endswith(".json"))
    Path(name).mkdir(parents=True)
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == [], out
    assert "OUT_DIR (step inference writes)" in errors(out)[0] and "is a folder" in errors(out)[0]


def test_text_only_run_skips_the_download_and_says_so(fake, launcher_env, capsys, tmp_path):
    launcher_env(MAX_FRAMES="0")
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    assert "download" not in ran and ran[0] == "inference"
    assert "MAX_FRAMES=0: a text-only run" in out and "download stage is skipped" in out
    assert not (tmp_path / "videos" / "download_manifest.json").exists()


def test_an_unchanged_demo_rerun_names_the_file_instead_of_an_accuracy_above(fake, launcher_env, capsys, tmp_path):
    launcher_env(DEMO="1")
    code, out, ran = launch(fake, capsys)
    assert code == 0 and "evaluate" in ran, out
    assert "the accuracy above is MEANINGLESS" in out
    code, out, ran = launch(fake, capsys)
    assert code == 0 and ran == [], out
    assert "accuracy above" not in out and "nothing rerun" in out and "is MEANINGLESS" in out


def test_every_line_a_stage_prints_carries_its_step_name(fake, launcher_env, capsys):
    launcher_env(DEMO="1")
    fake.hooks["evaluate_results:evaluate"] = lambda argv: print("overall 12 0.0%\nresults: eval.json")
    code, out, ran = launch(fake, capsys)
    assert code == 0, out
    assert "[evaluate] overall 12 0.0%" in out.splitlines() and "[evaluate] results: eval.json" in out.splitlines()
    bare = [ln for ln in out.splitlines() if ln and not ln.startswith("[")]
    assert bare == [], bare


def test_a_signal_during_the_demo_model_build_names_that_step(fake, launcher_env, capsys, tmp_path, monkeypatch):
    launcher_env(DEMO="1", OUT_DIR=str(tmp_path / "demo_out"))
    monkeypatch.delenv("MODEL_NAME")
    fake.hooks["tiny_model"] = lambda argv: os.kill(os.getpid(), signal.SIGINT)
    code, out, ran = launch(fake, capsys)
    assert code == 130, out
    (line,) = errors(out)
    assert "interrupted by SIGINT during step 'demo-model'" in line
    assert not (tmp_path / "demo_out" / "tiny-qwen3vl").exists()  # no half model: the next run builds it


def test_the_demo_model_build_names_the_folder_the_model_ends_in(fake, launcher_env, capsys, tmp_path, monkeypatch):
    """The build writes beside its place (``tiny-qwen3vl.partial``, which its own line names) and renames it: the log
    says where the model is now, so the ``.partial`` folder it named is not looked for."""
    launcher_env(DEMO="1", OUT_DIR=str(tmp_path / "demo_out"))
    monkeypatch.delenv("MODEL_NAME")
    code, out, _ = launch(fake, capsys)
    assert code == 0, out
    model = tmp_path / "demo_out" / "tiny-qwen3vl"
    assert f"step demo-model: done, tiny-qwen3vl.partial renamed to {model}" in out
    assert (model / "config.json").is_file() and not model.with_name("tiny-qwen3vl.partial").exists()


def test_the_demo_s_dry_run_lists_its_preparation_and_makes_nothing(fake, launcher_env, capsys, tmp_path, monkeypatch):
    """DEMO=1 --dry_run names the tiny model (and, with AUDIO=1, the videos with soundtracks) the run makes first, in
    the plan's layout; nothing is built. Once the model is there, its line says so."""
    launcher_env(DEMO="1", OUT_DIR=str(tmp_path / "demo_out"), AUDIO="1")
    monkeypatch.delenv("MODEL_NAME")
    code, out, ran = launch(fake, capsys, "--dry_run")
    assert code == 0 and ran == [], out
    plan = out[out.index("plan (--dry_run: nothing runs):"):].splitlines()
    model = tmp_path / "demo_out" / "tiny-qwen2_5omni"
    assert plan[1].split("] ", 1)[1] == (f"  demo-model         run   {model / 'config.json'} is missing (the tiny random-weight model) "
                                         f"-> {model}")
    assert plan[2].split()[2:4] == ["demo-videos", "run"] and plan[3].split()[2] == "download"
    assert not (tmp_path / "demo_out").exists()
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    code, out, _ = launch(fake, capsys, "--dry_run")
    assert code == 0 and f"  demo-model         skip  {model} exists -> {model}" in out


# --------------------------------------------------------------------------- shared build products


def test_build_lock_waits_for_the_holder_and_says_who_it_is(tmp_path):
    from k9bench.stage import build_lock

    lock = tmp_path / ".run_eval.demo-model.lock"
    order: list[str] = []
    held = threading.Event()

    def holder():
        with build_lock(lock, what="the tiny demo model"):
            held.set()
            time.sleep(0.4)
            order.append("first done")

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    said: list[str] = []
    with build_lock(lock, what="the tiny demo model", say=said.append):
        order.append("second in")
    thread.join()
    assert order == ["first done", "second in"]
    (line,) = said
    assert line.startswith(f"waiting for the tiny demo model: being built by pid {os.getpid()} on host ") and str(lock) in line
    assert not lock.exists()


def test_two_launches_racing_on_the_demo_model_both_finish_and_it_is_built_once(fake, launcher_env, capsys, tmp_path,
                                                                               monkeypatch):
    from k9bench.pipeline import plan

    launcher_env(DEMO="1", OUT_DIR=str(tmp_path / "o"))
    monkeypatch.delenv("MODEL_NAME")
    from k9bench.pipeline.env import read_settings
    from tests.pipeline_fakes import REPO

    settings = read_settings(dict(os.environ), REPO)
    builds: list[str] = []

    def slow_fake(script, argv):
        builds.append(script)
        time.sleep(0.4)
        return fake(script, argv)

    from tests.pipeline_fakes import use_fakes

    use_fakes(monkeypatch, slow_fake)
    said: dict[int, list[str]] = {0: [], 1: []}
    failures: list[BaseException] = []

    def one(i: int):
        try:
            plan.prepare_demo(settings, say=said[i].append)
        except BaseException as exc:  # noqa: BLE001 (the test reports it)
            failures.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join(10)
    assert failures == [] and builds == ["tiny_model"]
    model = Path(settings["MODEL_NAME"])
    assert (model / "config.json").is_file() and not model.with_name(model.name + ".partial").exists()
    lines = said[0] + said[1]
    assert any(ln.startswith("waiting for the tiny demo model") and "being built by pid" in ln for ln in lines), lines
    assert any("was built by another launch meanwhile" in ln for ln in lines), lines


def test_step_output_prefixes_lines_and_passes_launcher_lines(monkeypatch):
    from k9bench.pipeline.report_lines import StepOutput

    target = io.StringIO()
    out = StepOutput("calculate", target)
    out.write("a\nb")
    out.write("c\n[run_eval 12:00:00] mine\n")
    out.flush()
    assert target.getvalue() == "[calculate] a\n[calculate] bc\n[run_eval 12:00:00] mine\n"
    assert sys.stdout is not out


def test_an_empty_video_dir_is_named_as_video_dir_under_the_launcher(tiny_model_dir, tmp_path, monkeypatch, capfd):
    from k9bench.inference.stage import main as infer

    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["--model_name_or_path", str(tiny_model_dir), "--dataset_name", "demo", "--video_dir", str(empty), "--max_frames", "4",
            "--output_file", str(tmp_path / "raw.json"), "--device", "cpu"]
    monkeypatch.setenv("K9BENCH_INTERFACE", "launcher")
    assert infer(argv) == 2
    err = [ln for ln in capfd.readouterr().err.splitlines() if "holds none" in ln]
    assert len(err) == 1 and f"VIDEO_DIR={empty} holds none of the 3 video(s)" in err[0], err
    assert "--video_dir" not in err[0] and "--auto_download" not in err[0]
    monkeypatch.delenv("K9BENCH_INTERFACE")  # by hand, the flags the user typed
    assert infer(argv) == 2
    err = [ln for ln in capfd.readouterr().err.splitlines() if "holds none" in ln]
    assert len(err) == 1 and f"--video_dir {empty} holds none" in err[0] and "--auto_download" in err[0]


@pytest.fixture
def hub_unreachable(monkeypatch, tmp_path):
    """No offline switch, an empty cache, and a Hub (HF_ENDPOINT) at a closed loopback port: the probe decides."""
    import socket

    from k9bench.models import hub

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
                "HF_DATASETS_CACHE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty_hf_home"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    monkeypatch.setenv("HF_ENDPOINT", closed)
    monkeypatch.setattr(hub, "_probe_results", {})
    return closed


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry_run"])
@pytest.mark.parametrize("variable, value, said", [
    ("EMBEDDING_MODEL", "Qwen/Qwen3-Embeding-8B", "the embedding model is not in the Hugging Face cache"),
    ("MODEL_NAME", "Qwen/Qwen3-VL-4B-Instruct", "the model is not in the Hugging Face cache"),
    ("DATASET_NAME", "someone/k9bench-copy", "not in the Hugging Face cache"),
])
def test_an_unreachable_hub_is_seen_before_the_first_stage(fake, launcher_env, capsys, tmp_path, hub_unreachable, variable, value,
                                                          said, dry_run):
    """Issue 40 item 3: with no network (and no offline switch) an uncached Hub id ran stages and failed later (the
    embedding model's typo after the whole inference); the preflight now probes the Hub and refuses, naming the variable."""
    launcher_env(**{variable: value})
    started = time.monotonic()
    code, out, ran = launch(fake, capsys, *(["--dry_run"] if dry_run else []))
    assert code == 2 and ran == [], out
    assert time.monotonic() - started < 15
    (line,) = errors(out)
    assert f"{variable}={value}: {said}" in line and "cannot be reached" in line and hub_unreachable in line
    assert nothing_made(tmp_path)


def test_a_local_looking_dataset_name_is_said_to_be_taken_for_a_hub_id(fake, launcher_env, capfd, tmp_path, hub_unreachable):
    """``DATASET_NAME=k9bench_data/test`` with no such folder: said to be taken for a Hub dataset id (it was
    taken silently, then called a gated dataset), then refused as the Hub cannot be reached."""
    launcher_env(DATASET_NAME="k9bench_data/test")
    code = main([])
    out, err = capfd.readouterr()
    assert code == 2
    assert "DATASET_NAME=k9bench_data/test: no such file or folder here; taken for a Hugging Face Hub dataset id" in out + err
    (line,) = errors(out)
    assert "DATASET_NAME=k9bench_data/test: not in the Hugging Face cache" in line and "no such file or folder here" in line
    assert "cannot be reached" in line
    assert nothing_made(tmp_path)


def test_the_judge_s_default_endpoint_unreachable_is_refused_naming_judge_base_url(fake, launcher_env, capsys, tmp_path, monkeypatch,
                                                                                  hub_unreachable):
    """OPENAI_API_KEY set, JUDGE_BASE_URL not: the judge would call the OpenAI API (OPENAI_BASE_URL here, a closed
    loopback port); with no network it failed at its own step naming --base_url. Now the preflight refuses."""
    monkeypatch.setenv("OPENAI_BASE_URL", hub_unreachable + "/v1")
    launcher_env(OPENAI_API_KEY="sk-test-key-123456")
    code, out, ran = launch(fake, capsys, "--dry_run")
    assert code == 2 and ran == [], out
    (line,) = errors(out)
    assert f"JUDGE_BASE_URL is not set, so the judge would call {hub_unreachable}/v1, which cannot be reached" in line
    assert "--base_url" not in line


def test_the_judge_s_own_messages_name_the_launcher_variable_under_the_launcher(monkeypatch, hub_unreachable):
    from k9bench.judge.stage import EndpointUnreachable, probe
    from k9bench.models.hub import INTERFACE_ENV

    monkeypatch.setenv(INTERFACE_ENV, "launcher")
    with pytest.raises(EndpointUnreachable) as exc:
        probe(None, hub_unreachable + "/v1", "sk-test-key-123456")
    assert str(exc.value).startswith(f"JUDGE_BASE_URL={hub_unreachable}/v1: the judge endpoint does not answer")
    monkeypatch.delenv(INTERFACE_ENV)
    with pytest.raises(EndpointUnreachable) as exc:
        probe(None, hub_unreachable + "/v1", "sk-test-key-123456")
    assert str(exc.value).startswith(f"--base_url {hub_unreachable}/v1: the judge endpoint does not answer")
