"""The judge behind the stage contract (issue 20): stop signals, the output lock, done() by content and
fingerprint, refusal of another evaluations file, and progress lines in a log (issue 25)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import subjective_evals
from k9bench.layout import checkpoint_path
from tests.fake_openai_server import FakeOpenAIServer, Fault
from tests.test_judge_run import FAST, good, idx_of, make_records, write_eval
from tests.test_judge_run import SECRET as KEY
from tests.test_judge_run import api_key  # noqa: F401 (an autouse fixture: OPENAI_API_KEY=KEY)


@pytest.fixture
def server():
    """A fake judge that scores every entry (no served-model suffix)."""
    with FakeOpenAIServer(good) as s:
        yield s


def argv_for(folder: Path, server: FakeOpenAIServer, *extra: str) -> list[str]:
    return ["--evaluations", str(folder / "eval.json"), "--output", str(folder / "judge.json"), "--skipped",
            str(folder / "skipped.json"), "--base_url", server.base_url, *FAST, *extra]


def start(repo_root: Path, argv: list[str], err_path: Path) -> subprocess.Popen:
    env = {**os.environ, "OPENAI_API_KEY": KEY, "K9BENCH_NO_PROGRESS": "1"}
    with open(err_path, "w") as err:
        return subprocess.Popen([sys.executable, "subjective_evals.py", *argv], cwd=repo_root, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)


def wait_for(condition, proc: subprocess.Popen | None = None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the judge exited early with {proc.returncode}")
        time.sleep(0.05)
    pytest.fail("timed out waiting")


def checkpointed(ckpt: Path) -> list[int]:
    return [json.loads(line)["idx"] for line in ckpt.read_text().splitlines()] if ckpt.exists() else []


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_keeps_the_checkpoint_exits_75_and_the_rerun_sends_only_the_rest(signame, tmp_path, repo_root):
    """Issue 20, what must show: SIGTERM and SIGUSR1 during the judge keep the checkpoint and exit 75;
    the rerun sends only the unfinished entries (requests counted at the fake server)."""
    write_eval(tmp_path / "eval.json", make_records(12))
    ckpt = checkpoint_path(tmp_path / "judge.json")
    first = threading.Semaphore(5)

    def five_then_stall(req):  # five answers, then every request hangs until the signal
        return good(req) if first.acquire(blocking=False) else Fault(stall=60)

    with FakeOpenAIServer(five_then_stall) as server:
        proc = start(repo_root, argv_for(tmp_path, server, "--concurrency", "3", "--timeout", "60"), tmp_path / "err.txt")
        try:
            wait_for(lambda: len(checkpointed(ckpt)) >= 5 and len(server.chat_requests()) >= 8, proc)
            os.kill(proc.pid, getattr(signal, signame))
            assert proc.wait(timeout=30) == 75
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        first_run = sorted(idx_of(r) for r in server.chat_requests())
    err = (tmp_path / "err.txt").read_text()
    assert f"stopped by {signame}" in err and "rerun the same command" in err and "Traceback" not in err
    done_before = checkpointed(ckpt)
    assert len(done_before) == 5 and len(set(done_before)) == 5  # whole lines only, each once
    assert not (tmp_path / "judge.json").exists() and not (tmp_path / "skipped.json").exists()
    assert not list(tmp_path.glob("*.lock"))  # the lock went with the process

    with FakeOpenAIServer(good) as server:
        assert subjective_evals.main(argv_for(tmp_path, server)) == 0
        second_run = sorted(idx_of(r) for r in server.chat_requests())
    assert not set(second_run) & set(done_before)  # nothing finished is sent again
    assert sorted(second_run + done_before) == list(range(12))  # every unfinished entry exactly once
    assert len(first_run) > 5  # the first run had requests in flight when it stopped
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == list(range(12))


def test_a_second_judge_on_the_same_output_refuses_at_once_naming_the_holder(tmp_path, repo_root):
    """Two identical commands started together: the second refuses within a second (exit 2, the holder's
    pid named) and sends no request; every question is paid for once."""
    write_eval(tmp_path / "eval.json", make_records(6))
    gate = threading.Event()

    def held(req):  # answers wait until the test lets them through
        return good(req) if gate.wait(30) else Fault(500)

    with FakeOpenAIServer(held) as server:
        argv = argv_for(tmp_path, server, "--concurrency", "2")
        first = start(repo_root, argv, tmp_path / "err1.txt")
        try:
            wait_for(lambda: len(server.chat_requests()) >= 2, first)
            started = time.monotonic()
            second = subprocess.run([sys.executable, "subjective_evals.py", *argv], cwd=repo_root, capture_output=True, text=True,
                                    env={**os.environ, "OPENAI_API_KEY": KEY}, timeout=60)
            took = time.monotonic() - started
            assert second.returncode == 2
            errors = [line for line in second.stderr.splitlines() if " ERROR " in line]
            assert len(errors) == 1 and f"is being written by pid {first.pid}" in errors[0] and "--output" in errors[0], second.stderr
            assert took < 10  # the interpreter's start included; the refusal itself is immediate
            assert len(server.chat_requests()) == 2  # the second run sent nothing
            gate.set()
            assert first.wait(timeout=60) == 0
        finally:
            gate.set()
            if first.poll() is None:
                first.kill()
                first.wait()
        assert sorted(idx_of(r) for r in server.chat_requests()) == list(range(6))  # each question once


def _stage(argv: list[str]):
    from k9bench.judge import JudgeStage, config_from_argv

    return JudgeStage(config_from_argv(argv))


def test_done_is_judged_by_fingerprint_selection_and_input_content(tmp_path, server):
    write_eval(tmp_path / "eval.json", make_records(4))
    argv = argv_for(tmp_path, server)
    assert _stage(argv).done() == f"{tmp_path / 'judge.json'} is missing"
    assert subjective_evals.main(argv) == 0
    assert _stage(argv).done() is None
    stage = _stage(argv)
    assert stage.recorded()["fingerprint"] == stage.fingerprint() and stage.recorded()["name"] == "judge"
    assert _stage([*argv, "--judge_model", "gpt-4o-mini"]).done().startswith("settings differ: judge_model: 'gpt-4o' in the existing file")
    assert "temperature: None in the existing file, 0.5 now" in _stage([*argv, "--temperature", "0.5"]).done()
    assert _stage([*argv, "--limit", "2"]).done() == "selection differs: limit: None in the existing file, 2 now"
    assert _stage([*argv, "--concurrency", "1", "--max_tokens", "99"]).done() is None  # not result settings
    prompt = tmp_path / "p.txt"
    prompt.write_text("{question} {correct_answer} {model_output}")
    assert "prompt_sha256" in _stage([*argv, "--prompt_file", str(prompt)]).done()
    data = json.loads((tmp_path / "eval.json").read_text())
    data["threshold"], data["accuracy"] = 0.3, 0.75  # another file, the same requests (issue 31)
    (tmp_path / "eval.json").write_text(json.dumps(data))
    assert _stage(argv).done() is None
    records = make_records(4)
    records[0]["answer"] = "another answer"
    write_eval(tmp_path / "eval.json", records)
    assert _stage(argv).done() == f"input judge requests of {tmp_path / 'eval.json'} changed"


def test_a_rerun_on_another_evaluations_file_reuses_each_unchanged_request_and_sets_the_old_file_aside(tmp_path, server, capsys):
    """Issue 31 item 1: another threshold (verdicts the judge never sees) sends nothing and exits 0; new
    answers send only the changed entries, the old judge file is moved aside; requests counted at the
    fake server. (Issue 23's refusal of another evaluations file is gone: reuse is by request.)"""
    from k9bench.judge import JudgeStage, config_from_argv

    write_eval(tmp_path / "eval.json", make_records(4))
    argv = argv_for(tmp_path, server, "--no_cache")  # the earlier output alone (the store is tests/test_judge_cache.py's)
    assert subjective_evals.main(argv) == 0
    before = (tmp_path / "judge.json").read_bytes()
    data = json.loads((tmp_path / "eval.json").read_text())
    data["threshold"] = 0.9  # the same answers, another file
    (tmp_path / "eval.json").write_text(json.dumps(data))
    server.clear()
    assert subjective_evals.main(argv) == 0
    assert server.chat_requests() == [] and (tmp_path / "judge.json").read_bytes() == before
    assert not list(tmp_path.glob("judge.json.replaced-*"))  # nothing changed, nothing set aside
    meta = json.loads((tmp_path / "judge.json.meta.json").read_text())
    assert (meta["run"]["reused_entries"], meta["run"]["sent_this_run"]) == (4, 0)

    records = make_records(4)
    records[2]["answer"] = "answer-2 the dog sits and then it lies down"
    write_eval(tmp_path / "eval.json", records)
    capsys.readouterr()
    assert subjective_evals.main(argv) == 0
    assert [idx_of(r) for r in server.chat_requests()] == [2]  # only the changed entry is paid for
    aside = list(tmp_path.glob("judge.json.replaced-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == before  # the old judge file, kept
    entries = json.loads((tmp_path / "judge.json").read_text())
    assert [e["idx"] for e in entries] == [0, 1, 2, 3] and entries[2]["model_output"] == records[2]["answer"]
    meta = json.loads((tmp_path / "judge.json.meta.json").read_text())
    assert (meta["run"]["reused_entries"], meta["run"]["sent_this_run"], meta["run"]["changed_entries"]) == (3, 1, 1)
    assert JudgeStage(config_from_argv(argv)).done() is None  # now made from this file


def test_progress_reaches_a_log_at_each_tenth(tmp_path, server, capsys):
    """Issue 25 item 1: not on a terminal, the judge writes a progress line at each 10% (and at least every
    K9BENCH_PROGRESS_INTERVAL seconds): done/total, rate, ETA, failures so far; no bar fragments."""
    write_eval(tmp_path / "eval.json", make_records(20))
    server.responder = lambda req: Fault(400) if idx_of(req) in (3, 4) else good(req)
    assert subjective_evals.main(argv_for(tmp_path, server, "--concurrency", "1")) == 0  # stderr is not a terminal here
    err = capsys.readouterr().err
    lines = [line.split(" INFO k9bench.progress: ", 1)[1] for line in err.splitlines() if " INFO k9bench.progress: " in line]
    assert len(lines) == 10, lines
    assert lines[0].startswith("judge: 2/20 (10%), ") and lines[-1].startswith("judge: 20/20 (100%), ")
    assert "ETA" in lines[0] and lines[0].endswith(", 0 failed") and lines[-1].endswith(", 2 failed")
    assert "it/s" not in err and "\r" not in err


def test_progress_lines_keep_coming_while_requests_wait(tmp_path, server, capsys, monkeypatch):
    """Issue 25 item 1: a line at least every K9BENCH_PROGRESS_INTERVAL seconds, even while no result
    arrives (here one slow question and an interval of 0.2 s)."""
    monkeypatch.setenv("K9BENCH_PROGRESS_INTERVAL", "0.2")
    write_eval(tmp_path / "eval.json", make_records(1))
    server.responder = lambda req: Fault(stall=1.5, then=good(req))
    assert subjective_evals.main(argv_for(tmp_path, server)) == 0
    waiting = [line for line in capsys.readouterr().err.splitlines() if " INFO k9bench.progress: judge: 0/1 (0%)" in line]
    assert len(waiting) >= 2, waiting


def test_a_full_disk_during_a_checkpoint_append_is_one_line_and_the_rerun_resumes(tmp_path, server, capsys, monkeypatch):
    """Issue 23: a failed append (ENOSPC, faked) ends the run with one error line naming the checkpoint;
    what was appended stays valid and the rerun sends only the rest."""
    import errno

    from k9bench.artifact_io import CheckpointLog

    real_append = CheckpointLog.append
    calls = {"n": 0}

    def append(self, record):
        calls["n"] += 1
        if calls["n"] == 3:
            from k9bench.artifact_io import write_error

            raise write_error(self.path, OSError(errno.ENOSPC, "No space left on device"))
        return real_append(self, record)

    monkeypatch.setattr(CheckpointLog, "append", append)
    write_eval(tmp_path / "eval.json", make_records(5))
    code = subjective_evals.main(argv_for(tmp_path, server, "--concurrency", "1"))
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert code == 1 and len(errors) == 1 and "judge.json.partial.jsonl" in errors[0] and "Traceback" not in err
    ckpt = checkpoint_path(tmp_path / "judge.json")
    assert checkpointed(ckpt) == [0, 1] and not (tmp_path / "judge.json").exists()
    monkeypatch.setattr(CheckpointLog, "append", real_append)
    server.clear()
    assert subjective_evals.main(argv_for(tmp_path, server)) == 0
    # idx 2 was paid before its append failed: its reply is in the store (stored before the record, issue 40
    # item 9), so the rerun scores it from there and sends only the rest
    assert sorted({idx_of(r) for r in server.chat_requests()}) == [3, 4]
    written = json.loads((tmp_path / "judge.json").read_text())
    assert [e["idx"] for e in written] == [0, 1, 2, 3, 4] and [e.get("from_reply_store", False) for e in written][2] is True
