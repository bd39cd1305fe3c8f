"""subjective_evals.py end to end against the local fake OpenAI-compatible server (real openai client)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import subjective_evals
from k9bench import CATEGORIES, LETTERS
from k9bench.layout import checkpoint_path
from tests.fake_openai_server import FakeOpenAIServer, Fault, Reply, RecordedRequest

SECRET = "sk-test-e2e-77aa88bb99cc-never-write-me"
FAST = ["--retry_backoff", "0.01", "--retry_backoff_max", "0.05", "--timeout", "3"]


# -- helpers ------------------------------------------------------------------------


def make_records(n: int, failed: tuple = ()) -> list[dict]:
    recs = []
    for i in range(n):
        letter = LETTERS[i % 5]
        rec = {
            "idx": i,
            "question_category": CATEGORIES[i % 5],
            "video": "abcdefghijk.mp4",
            "ground_truth": letter,
            "response": f'{{"reasoning": "...", "answer": "answer-{i} the dog sits"}}',
            "answer": f"answer-{i} the dog sits",
            "scene_name": "abcdefghijk",
            "question": f"Question {i}: what does the dog do?",
            "options": [f"{L}. option {L} of {i}" for L in LETTERS],
            "model_name": "tiny",
            "timestamp": "2026-01-01T00:00:00",
        }
        if i in failed:
            rec.update(response="", answer="", error="video file missing", error_class="missing_video")
        recs.append(rec)
    return recs


def write_eval(path: Path, records: list[dict]) -> Path:
    data = {
        "evaluation_timestamp": "2026-01-01T00:00:00",
        "eval_mode": "fine",
        "threshold": 0.5,
        "accuracy": 0.0,
        "correct_count": 0,
        "total_count": len(records),
        "category_wise_accuracy": {},
        "individual_results": records,
        "metadata": {"similarity_model": "x", "similarity_calculated_at": "2026-01-01T00:00:00"},
    }
    path.write_text(json.dumps(data))
    return path


def idx_of(req: RecordedRequest) -> int:
    return int(re.search(r"answer-(\d+) the dog", req.text).group(1))


def scores_for(i: int) -> dict:
    return {"Logic": 1 + i % 10, "Factuality": 1 + (3 * i) % 10, "Accuracy": 1 + (7 * i) % 10, "Conciseness": 10 - i % 10, "Overall": 1 + (5 * i) % 10}


def good_text(i: int) -> str:
    s = scores_for(i)
    return f"CoT: answer {i} compared with the reference.\n{{'Logic': {s['Logic']}, 'Factuality': {s['Factuality']}, 'Accuracy': {s['Accuracy']}, 'Conciseness': {s['Conciseness']}, 'Overall': {s['Overall']}}}"


def good(req: RecordedRequest):
    i = idx_of(req)
    return Reply(good_text(i), delay=0.03 * ((7 * i) % 4))  # uneven latency: replies finish out of order


def per_idx(script: dict, then=good):
    """Responder: idx -> list of outcomes for its successive attempts, then ``then``."""
    lock = threading.Lock()
    queues = {k: list(v) for k, v in script.items()}

    def respond(req):
        i = idx_of(req)
        with lock:
            step = queues.get(i, []).pop(0) if queues.get(i) else None
        if step is None:
            return then(req)
        return step(req) if callable(step) else step

    return respond


def run(tmp: Path, server: FakeOpenAIServer, *extra: str, evaluations: Path | None = None) -> int:
    return subjective_evals.main(
        [
            "--evaluations", str(evaluations or tmp / "eval.json"),
            "--output", str(tmp / "judge.json"),
            "--skipped", str(tmp / "skipped.json"),
            "--base_url", server.base_url,
            *FAST,
            *extra,
        ]
    )


def load(path: Path):
    return json.loads(path.read_text())


def without_timestamps(entries: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "timestamp"} for e in entries]


@pytest.fixture
def server():
    with FakeOpenAIServer(good, served_suffix="-2024-08-06") as s:
        yield s


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


# -- tests -------------------------------------------------------------------------


def test_scores_every_answered_question_in_idx_order(tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(12, failed=(4, 7)))
    assert run(tmp_path, server, "--concurrency", "4") == 0

    entries = load(tmp_path / "judge.json")
    assert [e["idx"] for e in entries] == [0, 1, 2, 3, 5, 6, 8, 9, 10, 11]
    for e in entries:
        i = e["idx"]
        assert e["scores"] == scores_for(i)
        assert e["correct_answer"] == f"option {LETTERS[i % 5]} of {i}"
        assert e["model_output"] == f"answer-{i} the dog sits"
        assert e["cot"] == f"answer {i} compared with the reference."
        assert e["question_category"] == CATEGORIES[i % 5] and e["scene_name"] == "abcdefghijk"
        assert e["video_url"] == "https://www.youtube.com/watch?v=abcdefghijk"
        assert e["judge_model"] == "gpt-4o" and e["judge_model_served"] == "gpt-4o-2024-08-06"
        assert e["judge_attempts"] == 1 and e["judge_usage"]["requests"] == 1
    assert load(tmp_path / "skipped.json") == []
    assert not checkpoint_path(tmp_path / "judge.json").exists()

    requests = server.chat_requests()
    assert sorted(idx_of(r) for r in requests) == [e["idx"] for e in entries]  # failed records are not sent
    # the reference's request (issue 24 item 1): only model and messages, no temperature unless --temperature is given
    assert all(r.body["model"] == "gpt-4o" and set(r.body) == {"model", "messages"} for r in requests)
    prompt = requests[0].text
    i = idx_of(requests[0])
    assert f"Question {i}: what does the dog do?" in prompt and f"option {LETTERS[i % 5]} of {i}" in prompt

    summary = load(tmp_path / "judge.json.summary.json")
    assert summary["counts"] == {"scored": 10, "skipped": 0, "failed_at_inference": 2}
    assert summary["failed_at_inference_idx"] == [4, 7]
    expected_logic = sum(scores_for(e["idx"])["Logic"] for e in entries) / 10
    assert summary["axes"]["Logical"]["mean_1_10"] == pytest.approx(expected_logic)
    assert summary["axes"]["Logical"]["score_0_100"] == pytest.approx(10 * expected_logic)
    assert list(summary["axes"]) == ["Logical", "Factual", "Concise", "Accuracy", "Overall"]
    assert set(summary["per_category"]) == set(CATEGORIES)
    usage = summary["usage"]["this_run"]
    assert usage["requests"] == 10 and usage["total_tokens"] == sum(e["judge_usage"]["total_tokens"] for e in entries) > 0

    meta = load(tmp_path / "judge.json.meta.json")
    assert meta["judge"]["model"] == "gpt-4o" and meta["judge"]["prompt_source"] == "builtin:judge_prompt"
    assert meta["judge"]["sent_params"] == {} and meta["judge"]["temperature"] is None  # what was sent is recorded
    assert len(meta["judge"]["prompt_sha256"]) == 64 and meta["judge"]["base_url_used"].startswith(server.base_url)
    assert meta["provenance"]["script"] == "subjective_evals.py" and meta["run"]["served_models_this_run"] == {"gpt-4o-2024-08-06": 10}
    assert [f["idx"] for f in meta["failed_at_inference"]] == [4, 7]
    out = capsys.readouterr().out
    assert "Logical" in out and "scored 10" in out and "failed at inference 2" in out


MALFORMED = {
    1: "The answer looks fine to me, I would give it an eight.",  # no dictionary
    # (was an out-of-range 11: since issue 24 it is kept as given and flagged, as the reference does;
    # see test_reference_style_scores_are_read_and_flagged. Lower-case keys are skipped, as the reference skips them.)
    2: "CoT: x\n{'logic': 8, 'factuality': 7, 'accuracy': 6, 'conciseness': 9, 'overall': 7}",  # lower-case keys
    3: "CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Overall': 7}",  # missing key
    # (was a float 7.5: since issue 14 it is truncated to 7 as the reference does; see test_reference_style_scores_are_read_and_flagged)
    5: "CoT: x\n```json\n{\"Logic\": \"high\", \"Factuality\": 7, \"Accuracy\": 6, \"Conciseness\": 9, \"Overall\": 7}\n```",  # a word
    6: "",  # empty content
    7: "CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accur",  # truncated
}


def test_malformed_replies_are_skipped_with_raw_reply_then_retried(tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(9))
    server.responder = per_idx({i: [Reply(text)] for i, text in MALFORMED.items()})
    assert run(tmp_path, server, "--concurrency", "3") == 0  # the reference's exit: 0, with the count on the last line
    log_text = capsys.readouterr().err
    assert log_text.rstrip().splitlines()[-1].endswith(f"judge: 3 scored, 6 skipped -> {tmp_path / 'judge.json'}, "
                                                       f"{tmp_path / 'skipped.json'} (rerun the same command to retry the skipped ones)")

    entries = load(tmp_path / "judge.json")
    skipped = load(tmp_path / "skipped.json")
    assert [e["idx"] for e in entries] == [0, 4, 8]
    assert [s["idx"] for s in skipped] == sorted(MALFORMED)
    for s in skipped:
        assert s["kind"] == "parse_error" and s["error"].startswith("parse failure:")
        assert s["raw_reply"] == MALFORMED[s["idx"]] and s["timestamp"]
    summary = load(tmp_path / "judge.json.summary.json")
    assert summary["counts"]["skipped"] == 6 and summary["skipped_idx"] == sorted(MALFORMED)
    assert "idx 2: unparseable judge reply (missing score key(s): Logic, Factuality, Accuracy, Conciseness, Overall (found 'logic'" in log_text

    # the same command again: done entries are not re-sent, skipped ones are retried
    server.clear()
    assert run(tmp_path, server, "--concurrency", "3") == 0
    assert sorted(idx_of(r) for r in server.chat_requests()) == sorted(MALFORMED)
    assert [e["idx"] for e in load(tmp_path / "judge.json")] == list(range(9))
    assert all(e["scores"] == scores_for(e["idx"]) for e in load(tmp_path / "judge.json"))
    assert load(tmp_path / "skipped.json") == []


def test_429_500_and_timeouts_succeed_on_retry(tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(5))
    server.responder = per_idx(
        {
            0: [Fault(429, retry_after=1)],
            1: [Fault(500), Fault(503)],
            2: [Fault(stall=5.0)],  # outlasts --timeout 0.5
            3: [Fault(drop=True)],
        }
    )
    assert run(tmp_path, server, "--concurrency", "5", "--timeout", "0.5", "--max_retries", "3") == 0
    log_text = capsys.readouterr().err
    entries = {e["idx"]: e for e in load(tmp_path / "judge.json")}
    assert sorted(entries) == [0, 1, 2, 3, 4]
    assert all(entries[i]["scores"] == scores_for(i) for i in entries)
    assert {i: entries[i]["judge_attempts"] for i in entries} == {0: 2, 1: 3, 2: 2, 3: 2, 4: 1}
    times0 = [r.received_at for r in server.chat_requests() if idx_of(r) == 0]
    assert times0[1] - times0[0] >= 1.0  # Retry-After honoured
    assert "idx 0: rate_limit on attempt 1/4" in log_text and "Retry-After 1" in log_text
    for line in ("idx 1: server_error on attempt 2/4", "idx 2: timeout on attempt 1/4", "idx 3: connection on attempt 1/4"):
        assert line in log_text
    assert load(tmp_path / "judge.json.summary.json")["retries_this_run"] == 5
    assert load(tmp_path / "skipped.json") == []


def test_permanent_failures_land_in_skipped_never_as_scores(tmp_path, server):
    write_eval(tmp_path / "eval.json", make_records(4))
    server.responder = per_idx({1: [Fault(500)] * 10, 2: [Fault(400)]})
    assert run(tmp_path, server, "--max_retries", "2") == 0
    assert [e["idx"] for e in load(tmp_path / "judge.json")] == [0, 3]
    skipped = {s["idx"]: s for s in load(tmp_path / "skipped.json")}
    assert skipped[1]["kind"] == "api_error" and skipped[1]["error_kind"] == "server_error" and skipped[1]["status_code"] == 500
    assert skipped[1]["judge_attempts"] == 3 and "500" in skipped[1]["error"]
    assert skipped[2]["error_kind"] == "client_error" and skipped[2]["judge_attempts"] == 1
    assert "raw_reply" not in skipped[1]
    counts = [idx_of(r) for r in server.chat_requests()]
    assert counts.count(1) == 3 and counts.count(2) == 1

    server.clear()
    server.responder = good
    assert run(tmp_path, server) == 0
    assert sorted(idx_of(r) for r in server.chat_requests()) == [1, 2]
    assert [e["idx"] for e in load(tmp_path / "judge.json")] == [0, 1, 2, 3]
    assert load(tmp_path / "skipped.json") == []


@pytest.mark.slow
def test_kill_mid_run_then_rerun_loses_nothing_and_scores_nothing_twice(tmp_path, repo_root):
    records = make_records(14, failed=(6,))
    answered = [r["idx"] for r in records if "error" not in r]

    # an uninterrupted run, for comparison
    (tmp_path / "a").mkdir()
    write_eval(tmp_path / "a" / "eval.json", records)
    with FakeOpenAIServer(good, served_suffix="-2024-08-06") as server:
        assert run(tmp_path / "a", server, "--concurrency", "3") == 0
    reference = load(tmp_path / "a" / "judge.json")

    # a run killed after 5 answers: the rest stall until the kill
    b = tmp_path / "b"
    b.mkdir()
    write_eval(b / "eval.json", records)
    answered_lock = threading.Lock()
    state = {"n": 0}

    def first_five(req):
        with answered_lock:
            state["n"] += 1
            n = state["n"]
        return good(req) if n <= 5 else Fault(stall=60)

    with FakeOpenAIServer(first_five, served_suffix="-2024-08-06") as server:
        env = {**os.environ, "OPENAI_API_KEY": SECRET, "K9BENCH_NO_PROGRESS": "1"}
        cmd = [sys.executable, "subjective_evals.py", "--evaluations", str(b / "eval.json"), "--output", str(b / "judge.json"),
               "--skipped", str(b / "skipped.json"), "--base_url", server.base_url, "--concurrency", "3", *FAST, "--timeout", "60"]
        ckpt = checkpoint_path(b / "judge.json")
        with open(b / "stderr.txt", "w") as err:
            proc = subprocess.Popen(cmd, cwd=repo_root, env=env, stdout=subprocess.DEVNULL, stderr=err)
            try:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if ckpt.exists() and ckpt.read_text().count("\n") >= 5:
                        break
                    if proc.poll() is not None:
                        pytest.fail(f"judge exited early: {(b / 'stderr.txt').read_text()}")
                    time.sleep(0.05)
                time.sleep(0.2)  # let the stalled requests be in flight
                os.kill(proc.pid, signal.SIGKILL)
            finally:
                proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        first_requests = [idx_of(r) for r in server.chat_requests()]
    assert not (b / "judge.json").exists()  # never finalised
    assert (b / "judge.json.lock").exists()  # the killed run's lock is left behind: the rerun takes it over
    done_before = [json.loads(line)["idx"] for line in ckpt.read_text().splitlines()]
    assert len(done_before) == 5 and len(first_requests) > 5

    with FakeOpenAIServer(good, served_suffix="-2024-08-06") as server:
        assert run(b, server, "--concurrency", "3") == 0
        second_requests = [idx_of(r) for r in server.chat_requests()]
    assert not set(second_requests) & set(done_before)  # nothing scored twice
    assert sorted(second_requests + done_before) == answered  # nothing lost, each exactly once
    assert without_timestamps(load(b / "judge.json")) == without_timestamps(reference)
    assert load(b / "skipped.json") == [] and not ckpt.exists() and not (b / "judge.json.lock").exists()
    summary_a = load(tmp_path / "a" / "judge.json.summary.json")
    summary_b = load(b / "judge.json.summary.json")
    assert summary_b["axes"] == summary_a["axes"] and summary_b["per_category"] == summary_a["per_category"]
    assert summary_b["usage"]["entries_and_skipped"] == summary_a["usage"]["entries_and_skipped"]
    for path in tmp_path.rglob("*"):  # the killed run's stderr included
        assert not path.is_file() or SECRET not in path.read_text(errors="replace"), path


def test_api_key_is_never_written_or_logged(tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(6))

    def echo_key(req):  # a server that puts the key into an error body and a reply
        token = req.headers.get("authorization", "")[len("Bearer "):]
        return Fault(401, body=json.dumps({"error": {"message": f"Incorrect API key provided: {token}"}}))

    server.responder = per_idx({1: [echo_key], 2: [lambda req: Reply("I saw " + req.headers["authorization"])]})
    assert run(tmp_path, server, "-v", "-v", "--dataset_name", "demo") == 0
    captured = capsys.readouterr()
    assert "DEBUG" in captured.err  # library debug logs were on
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in server.chat_requests())  # the key was used
    skipped = {s["idx"]: s for s in load(tmp_path / "skipped.json")}
    assert "Incorrect API key provided: ***" in skipped[1]["error"]
    assert skipped[2]["raw_reply"] == "I saw Bearer ***"
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"judge.json", "skipped.json", "judge.json.meta.json", "judge.json.summary.json"}
    for path in written:
        assert SECRET not in path.read_text(errors="replace"), path
    assert SECRET not in captured.out and SECRET not in captured.err
    assert SECRET[:12] not in json.dumps(load(tmp_path / "judge.json.meta.json"))


def test_missing_key_stops_before_any_work(tmp_path, server, monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY")
    write_eval(tmp_path / "eval.json", make_records(3))
    argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json")]
    assert subjective_evals.main(argv) == 2
    err = capsys.readouterr().err
    assert "OPENAI_API_KEY is not set" in err and "--base_url" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]
    assert server.chat_requests() == []
    # a self-hosted server needs none: a placeholder is sent
    assert run(tmp_path, server) == 0
    assert {r.headers["authorization"] for r in server.chat_requests()} == {"Bearer not-needed"}


def test_prompt_file_limit_and_resume_guards(tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(6, failed=(1,)))
    prompt = tmp_path / "my_judge.txt"
    prompt.write_text("Q={question}\nREF={correct_answer}\nANS={model_output}\nReply like {{'Logic': 1, ...}}\n")
    assert run(tmp_path, server, "--prompt_file", str(prompt), "--limit", "3") == 0
    first = server.chat_requests()
    assert sorted(idx_of(r) for r in first) == [0, 2, 3]  # the first 3 answered questions
    r0 = next(r for r in first if idx_of(r) == 0)
    assert r0.text == "Q=Question 0: what does the dog do?\nREF=option A of 0\nANS=answer-0 the dog sits\nReply like {'Logic': 1, ...}\n"
    meta = load(tmp_path / "judge.json.meta.json")
    assert meta["judge"]["prompt_source"] == str(prompt)

    server.clear()
    assert run(tmp_path, server, "--prompt_file", str(prompt), "--limit", "4") == 0
    assert [idx_of(r) for r in server.chat_requests()] == [4]
    assert [e["idx"] for e in load(tmp_path / "judge.json")] == [0, 2, 3, 4]

    server.clear()
    capsys.readouterr()
    assert run(tmp_path, server, "--limit", "4") == 2  # the built-in prompt would mix two prompts in one file
    assert "prompt_sha256" in capsys.readouterr().err
    assert run(tmp_path, server, "--prompt_file", str(prompt), "--judge_model", "gpt-4o-mini") == 2
    assert "model 'gpt-4o'" in capsys.readouterr().err
    assert server.chat_requests() == []


def test_bad_inputs_exit_2_with_a_clear_message(tmp_path, server, capsys):
    records = make_records(3)
    records[2]["ground_truth"] = "Q"
    write_eval(tmp_path / "eval.json", records)
    bad_prompt = tmp_path / "p.txt"
    bad_prompt.write_text("{question} only")
    assert run(tmp_path, server) == 2
    err = capsys.readouterr().err
    assert "idx 2" in err and "ground_truth 'Q'" in err
    assert run(tmp_path, server, evaluations=tmp_path / "nope.json") == 2
    assert "nope.json: no such file" in capsys.readouterr().err
    assert run(tmp_path, server, "--prompt_file", str(bad_prompt)) == 2
    assert "lacks the placeholder(s) {correct_answer}, {model_output}" in capsys.readouterr().err
    (tmp_path / "a_folder").mkdir()
    assert subjective_evals.main(["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "a_folder"),
                                  "--base_url", server.base_url]) == 2
    assert "--output" in (err := capsys.readouterr().err) and "a_folder is a folder" in err
    write_eval(tmp_path / "empty.json", [])
    assert run(tmp_path, server, evaluations=tmp_path / "empty.json") == 2
    assert "--evaluations " + str(tmp_path / "empty.json") + ": no records in 'individual_results'" in capsys.readouterr().err
    assert server.chat_requests() == []
    assert not (tmp_path / "judge.json").exists()


def test_dataset_cross_check_reports_mismatches(tmp_path, server, capsys):
    from k9bench.data.dataset import load_questions

    questions = load_questions("demo").questions[:3]
    records = []
    for q in questions:
        rec = q.record_fields()
        rec.update(response="r", answer=f"answer-{q.idx} the dog sits")
        records.append(rec)
    records[1]["question"] = "An edited question?"
    write_eval(tmp_path / "eval.json", records)
    assert run(tmp_path, server, "--dataset_name", "demo") == 0
    mismatches = load(tmp_path / "judge.json.meta.json")["dataset_check"]["mismatches"]
    assert mismatches == [{"idx": questions[1].idx, "field": "question", "record": "An edited question?", "dataset": questions[1].question}]
    assert "1 mismatch(es)" in capsys.readouterr().err
    assert len(load(tmp_path / "judge.json")) == 3


def signal_when_checkpointed(ckpt: Path, lines: int, signum: int) -> threading.Thread:
    """A watcher that sends ``signum`` to this process once ``ckpt`` holds ``lines`` lines."""

    def watch():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if ckpt.exists() and ckpt.read_text().count("\n") >= lines:
                time.sleep(0.1)  # the next request is in flight (stalled)
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_keeps_checkpointed_results_and_writes_no_final_file(tmp_path, server, capsys):
    """Ctrl-C (SIGINT) goes through the stage's stop policy: exit 75, the checkpoint kept, no final file;
    the rerun sends only the unfinished entries. (It was exit 130 before the stage contract.)"""
    write_eval(tmp_path / "eval.json", make_records(6))
    server.responder = lambda req: good(req) if idx_of(req) < 4 else Fault(stall=30)
    ckpt = checkpoint_path(tmp_path / "judge.json")
    watcher = signal_when_checkpointed(ckpt, 4, signal.SIGINT)
    assert run(tmp_path, server, "--concurrency", "1") == 75
    watcher.join(timeout=5)
    assert "stopped by SIGINT" in capsys.readouterr().err
    assert [json.loads(line)["idx"] for line in ckpt.read_text().splitlines()] == [0, 1, 2, 3]
    assert not (tmp_path / "judge.json").exists() and not (tmp_path / "skipped.json").exists()

    server.clear()
    server.responder = good
    assert run(tmp_path, server) == 0
    assert sorted(idx_of(r) for r in server.chat_requests()) == [4, 5]
    assert [e["idx"] for e in load(tmp_path / "judge.json")] == list(range(6))
    meta = load(tmp_path / "judge.json.meta.json")
    assert len(meta["input"]["sha256"]) == 64 and meta["input"]["stage"] == "eval"


@pytest.mark.parametrize("value, fragment", [("11", "score 'Overall' is '11' (type str), not an integer"),
                                             (float("nan"), "score 'Overall' is nan (type float), not an integer"),
                                             (7.5, "score 'Overall' is 7.5 (type float), not an integer"),
                                             (None, "score 'Overall' is None (type NoneType), not an integer")])
def test_a_corrupt_earlier_output_is_refused_not_trusted(value, fragment, tmp_path, server, capsys):
    """Issue 23: an earlier judge file with a string or NaN score is refused in one line (an out-of-range
    integer is a score the reference keeps, so it is accepted)."""
    write_eval(tmp_path / "eval.json", make_records(3))
    assert run(tmp_path, server) == 0
    entries = load(tmp_path / "judge.json")
    entries[1]["scores"]["Overall"] = value
    (tmp_path / "judge.json").write_text(json.dumps(entries))  # json writes NaN as the bare word NaN
    capsys.readouterr()
    server.clear()
    assert run(tmp_path, server) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and "judge.json: idx 1: " + fragment in errors[0]
    assert server.chat_requests() == []


def test_a_wrong_endpoint_fails_within_seconds_before_the_first_question(tmp_path, capsys):
    """Issue 25 item 4: the endpoint is probed first; nothing listening there is exit 2 in seconds, one
    line naming --base_url, no question sent, nothing written."""
    write_eval(tmp_path / "eval.json", make_records(40))
    down = FakeOpenAIServer(good)
    down.start()
    dead_url = down.base_url
    down.stop()  # nothing listens on that port any more: every connection is refused
    argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"), "--base_url", dead_url, *FAST]
    started = time.monotonic()
    assert subjective_evals.main(argv) == 2
    assert time.monotonic() - started < 15
    errors = [line for line in capsys.readouterr().err.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"--base_url {dead_url}" in errors[0] and "does not answer" in errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]


def test_an_endpoint_that_goes_down_mid_run_stops_the_run_instead_of_retrying_every_entry(tmp_path, server, capsys):
    from k9bench.judge import unreachable_after

    write_eval(tmp_path / "eval.json", make_records(40))
    server.responder = lambda req: good(req) if idx_of(req) < 3 else Fault(drop=True)  # the probe passes, then it fails
    argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"), "--skipped",
            str(tmp_path / "skipped.json"), "--base_url", server.base_url, "--concurrency", "1", "--max_retries", "1", *FAST]
    assert subjective_evals.main(argv) == 2
    err = capsys.readouterr().err
    assert f"could not be reached for {unreachable_after(1)} entries in a row" in err and "check --base_url" in err
    ckpt = checkpoint_path(tmp_path / "judge.json")
    lines = [json.loads(line) for line in ckpt.read_text().splitlines()]
    assert len(lines) == 3 + unreachable_after(1) < 40  # stopped early, each result checkpointed
    assert [r["status"] for r in lines] == ["scored"] * 3 + ["skipped"] * unreachable_after(1)
    assert not (tmp_path / "judge.json").exists()  # like an interruption: no final file, the rerun finishes
    server.clear()
    server.responder = good
    assert subjective_evals.main(argv) == 0
    # (a set: the first run's last request, abandoned in flight, may still be retrying inside this process)
    assert sorted({idx_of(r) for r in server.chat_requests()}) == list(range(3, 40))
    assert [e["idx"] for e in load(tmp_path / "judge.json")] == list(range(40))
    assert load(tmp_path / "skipped.json") == [] and not ckpt.exists()


# -- the reference's files and replies (issue 14 items 4 and 5, SPEC section 9) ---------------------


REFERENCE_REPLIES = {
    # idx: reply -- each kind of SPEC section 9, scored or skipped as the reference does
    1: "CoT: x\n{'Logic': '9', 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}",  # numeric string
    2: 'CoT: y\n{"Logic": 7.5, "Factuality": 7, "Accuracy": 6, "Conciseness": 9, "Overall": 10.9}',  # non-integers
    3: "CoT: z\n{'Logic': 0, 'Factuality': 11, 'Accuracy': -3, 'Conciseness': 9, 'Overall': 7}",  # out of range: kept
    4: "CoT: t\n{'Logic': True, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}",  # true -> 1
    5: "CoT: e\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7, 'Note': 'n/a'}",  # extra key kept
    6: "CoT: l\n{'logic': 8, 'factuality': 7, 'accuracy': 6, 'conciseness': 9, 'overall': 7}",  # lower-case keys: skipped
    7: "CoT: m\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Overall': 7}",  # a missing key: skipped
}


def test_reference_style_scores_are_read_and_flagged(tmp_path, server, capsys):
    """Issue 24 item 1: the reference's int() on each score; out-of-range integers kept as given and
    flagged, lower-case keys skip the entry, extra keys kept; exit 0 with skipped entries."""
    write_eval(tmp_path / "eval.json", make_records(8))
    server.responder = per_idx({i: [Reply(text)] for i, text in REFERENCE_REPLIES.items()})
    assert run(tmp_path, server) == 0
    assert capsys.readouterr().err.rstrip().splitlines()[-1].split(" WARNING k9bench.judge: ")[1].startswith("judge: 6 scored, 2 skipped")
    entries = {e["idx"]: e for e in load(tmp_path / "judge.json")}
    assert sorted(entries) == [0, 1, 2, 3, 4, 5]
    assert entries[1]["scores"]["Logic"] == 9 and entries[1]["score_adjustments"] == {"Logic": "9"}
    assert entries[2]["scores"]["Logic"] == 7 and entries[2]["scores"]["Overall"] == 10
    assert entries[2]["score_adjustments"] == {"Logic": 7.5, "Overall": 10.9}
    assert {k: entries[3]["scores"][k] for k in ("Logic", "Factuality", "Accuracy")} == {"Logic": 0, "Factuality": 11, "Accuracy": -3}
    assert entries[3]["score_adjustments"] == {"Logic": 0, "Factuality": 11, "Accuracy": -3}
    assert entries[3]["scores_out_of_range"] == ["Logic", "Factuality", "Accuracy"]
    assert entries[4]["scores"]["Logic"] == 1 and entries[4]["score_adjustments"] == {"Logic": True}
    assert entries[5]["scores"] == {"Logic": 8, "Factuality": 7, "Accuracy": 6, "Conciseness": 9, "Overall": 7, "Note": "n/a"}
    assert "score_adjustments" not in entries[0] and "score_adjustments" not in entries[5]
    skipped = {s["idx"]: s for s in load(tmp_path / "skipped.json")}
    assert sorted(skipped) == [6, 7] and all(s["kind"] == "parse_error" for s in skipped.values())
    assert "found 'logic'" in skipped[6]["error"] and "Conciseness" in skipped[7]["error"]
    summary = load(tmp_path / "judge.json.summary.json")
    assert summary["score_adjusted_idx"] == [1, 2, 3, 4] and summary["out_of_range_idx"] == [3]
    logic = [entries[i]["scores"]["Logic"] for i in sorted(entries)]
    assert summary["axes"]["Logical"]["mean_1_10"] == round(sum(logic) / 6, 4)  # averaged in as given, as the reference does


def test_strict_scores_and_fail_on_skipped(tmp_path, server):
    """--strict_scores gives the earlier refusal of out-of-range and bool scores; --fail_on_skipped exits 1."""
    write_eval(tmp_path / "eval.json", make_records(8))
    server.responder = per_idx({i: [Reply(text)] for i, text in REFERENCE_REPLIES.items()})
    assert run(tmp_path, server, "--strict_scores", "--fail_on_skipped") == 1
    assert sorted(e["idx"] for e in load(tmp_path / "judge.json")) == [0, 1, 2, 5]
    skipped = {s["idx"]: s for s in load(tmp_path / "skipped.json")}
    assert sorted(skipped) == [3, 4, 6, 7]
    assert "score 'Logic' is 0, outside 1-10 (--strict_scores)" in skipped[3]["error"]
    assert "score 'Logic' is True, not an integer 1-10" in skipped[4]["error"]
    assert load(tmp_path / "judge.json.meta.json")["judge"]["fingerprint"]["strict_scores"] is True


def test_temperature_is_sent_and_recorded_only_when_given(tmp_path, server):
    write_eval(tmp_path / "eval.json", make_records(2))
    assert run(tmp_path, server, "--temperature", "0", "--max_tokens", "300") == 0
    assert all(r.body["temperature"] == 0.0 and r.body["max_tokens"] == 300 for r in server.chat_requests())
    judge = load(tmp_path / "judge.json.meta.json")["judge"]
    assert judge["sent_params"] == {"temperature": 0.0, "max_tokens": 300} and judge["fingerprint"]["temperature"] == 0.0


def test_dataset_questions_without_an_answer_are_skipped_as_missing_model_answer(tmp_path, server, capsys):
    from k9bench.data.dataset import load_questions

    questions = load_questions("demo").questions
    answered = [q for q in questions if q.idx % 3 != 1]
    records = []
    for q in answered:
        rec = q.record_fields()
        rec.update(response="r", answer=f"answer-{q.idx} the dog sits")
        records.append(rec)
    write_eval(tmp_path / "eval.json", records)
    assert run(tmp_path, server, "--dataset_name", "demo") == 0  # nothing a rerun could fix
    missing = sorted(q.idx for q in questions if q.idx % 3 == 1)
    skipped = load(tmp_path / "skipped.json")
    assert [s["idx"] for s in skipped] == missing
    assert all(s["error"] == "missing_model_answer" and s["kind"] == "missing_model_answer" and s["timestamp"] for s in skipped)
    assert sorted(idx_of(r) for r in server.chat_requests()) == sorted(q.idx for q in answered)
    summary = load(tmp_path / "judge.json.summary.json")
    assert summary["missing_model_answer_idx"] == missing and summary["counts"]["scored"] == len(answered)
    assert load(tmp_path / "judge.json.meta.json")["dataset_check"]["missing_model_answer"] == missing
    err = capsys.readouterr().err
    assert f"{len(missing)} question(s) of demo have no record" in err
    assert f"judge: {len(answered)} scored, 0 skipped, {len(missing)} without an answer in the file (missing_model_answer)" in err.splitlines()[-1]
    # a rerun sends nothing and keeps the list
    server.clear()
    assert run(tmp_path, server, "--dataset_name", "demo") == 0
    assert server.chat_requests() == [] and [s["idx"] for s in load(tmp_path / "skipped.json")] == missing


def test_reference_failed_records_are_failed_at_inference_not_a_crash(tmp_path, server):
    from k9bench.artifacts import QuestionRecord
    from k9bench.artifact_io import ArtifactError

    try:
        QuestionRecord.from_dict({"example_id": 2, "error": "CUDA out of memory"})
    except ArtifactError:
        pytest.skip("k9bench/artifacts.py does not read the reference's {'example_id', 'error'} records yet (issue 14 item 2)")
    records = make_records(4)
    records[2] = {"example_id": 2, "error": "CUDA out of memory"}  # the reference's failed sample
    write_eval(tmp_path / "eval.json", records)
    assert run(tmp_path, server) == 0
    assert [e["idx"] for e in load(tmp_path / "judge.json")] == [0, 1, 3]
    meta = load(tmp_path / "judge.json.meta.json")
    assert [f["idx"] for f in meta["failed_at_inference"]] == [2]
    assert "CUDA out of memory" in meta["failed_at_inference"][0]["error"]
    assert load(tmp_path / "judge.json.summary.json")["counts"]["failed_at_inference"] == 1


def test_a_judge_prompt_matching_the_reference_hash_is_recorded_as_confirmed(tmp_path, server, monkeypatch):
    """Issue 24 item 4: the meta sidecar says whether the judge prompt is the reference's, by its hash
    (a stand-in template and its own hash swapped in; nothing of the reference is stored here)."""
    import hashlib

    from k9bench.data import published

    stand_in = "Judge this.\nQ: {question}\nRight: {correct_answer}\nGiven: {model_output}\nCoT: then {{'Logic': X}}\n"
    filled = stand_in.format(question="{question}", correct_answer="{correct_answer}", model_output="{model_output}")
    monkeypatch.setattr(published, "REFERENCE_JUDGE_PROMPT_SHA256", hashlib.sha256(filled.encode()).hexdigest())
    write_eval(tmp_path / "eval.json", make_records(2))
    prompt = tmp_path / "judge_prompt.txt"
    prompt.write_text(stand_in)
    assert run(tmp_path, server, "--prompt_file", str(prompt)) == 0
    judge = load(tmp_path / "judge.json.meta.json")["judge"]
    assert judge["reference_prompt"] is True and judge["prompt_status"] == published.CONFIRMED_PROMPTS
    prompt.write_text(stand_in.replace("Judge this.", "Judge this!"))  # one character differs
    (tmp_path / "other").mkdir()
    write_eval(tmp_path / "other" / "eval.json", make_records(2))
    assert run(tmp_path / "other", server, "--prompt_file", str(prompt)) == 0
    judge = load(tmp_path / "other" / "judge.json.meta.json")["judge"]
    assert judge["reference_prompt"] is False and judge["prompt_status"].startswith("unconfirmed")


def reference_style_read(reply: str) -> dict | None:
    """An independent reading of a reply as SPEC section 9 describes the reference (our own few lines,
    not its code): the last {...} block, JSON or a Python literal, the five keys spelled exactly, each
    through int(), extra keys kept; any failure skips the entry (None)."""
    import ast
    import re as _re

    blocks = _re.findall(r"\{[^{}]*\}", reply.replace("```json", "").replace("```python", "").replace("```", ""))
    if not blocks:
        return None
    try:
        data = json.loads(blocks[-1])
    except ValueError:
        try:
            data = ast.literal_eval(blocks[-1])
        except (ValueError, SyntaxError):
            return None
    try:
        scores = {k: int(data[k]) for k in ("Logic", "Factuality", "Accuracy", "Conciseness", "Overall")}
    except (KeyError, ValueError, TypeError, OverflowError):
        return None
    return {**scores, **{k: v for k, v in data.items() if k not in scores}}


def test_each_reply_kind_is_scored_or_skipped_as_a_reference_style_reader_does(tmp_path, server):
    """Issue 24, what must show: our entries and skips agree, reply by reply, with the reference-style
    reading above (the reply kinds of REFERENCE_REPLIES and MALFORMED, NaN and a word included)."""
    replies = {**{i: t for i, t in REFERENCE_REPLIES.items()},
               **{10 + i: t for i, t in MALFORMED.items()},
               20: 'CoT: n\n{"Logic": NaN, "Factuality": 7, "Accuracy": 6, "Conciseness": 9, "Overall": 7}',
               21: "CoT: w\n{'Logic': 'eight', 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}",
               22: "CoT: s\n{'Logic': '7.5', 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}",
               23: "CoT: f\n```json\n{\"Logic\": 12, \"Factuality\": 7, \"Accuracy\": 6, \"Conciseness\": 9, \"Overall\": 7}\n```"}
    write_eval(tmp_path / "eval.json", make_records(24))
    server.responder = per_idx({i: [Reply(t)] for i, t in replies.items()})
    assert run(tmp_path, server) == 0
    entries = {e["idx"]: e for e in load(tmp_path / "judge.json")}
    skipped = {s["idx"] for s in load(tmp_path / "skipped.json")}
    for i, reply in replies.items():
        expected = reference_style_read(reply)
        if expected is None:
            assert i in skipped and i not in entries, (i, reply)
        else:
            assert entries[i]["scores"] == expected, (i, reply)


def test_checkpoint_lines_set_aside_are_counted_in_the_summary_and_meta(tmp_path, server, capsys):
    """A checkpoint with a line that is no record and a final line torn by a kill: the run resumes, and
    the summary and meta sidecar say how many lines were set aside (and where) instead of only a log line."""
    write_eval(tmp_path / "eval.json", make_records(3))
    ckpt = tmp_path / "judge.json.partial.jsonl"
    ckpt.write_bytes(b"this is not a record\n" + b'{"idx": 2, "status": "sco')  # a bad line, then a torn tail
    capsys.readouterr()
    assert run(tmp_path, server) == 0
    assert f"checkpoint of the earlier run: 1 bad line(s) moved to {ckpt}.rejected, 1 torn final line dropped" in capsys.readouterr().out
    summary, meta = load(tmp_path / "judge.json.summary.json"), load(tmp_path / "judge.json.meta.json")
    for block in (summary, meta["run"]):
        assert block["checkpoint_rejected_lines"] == 1 and block["checkpoint_torn_lines"] == 1
        assert block["checkpoint_rejected_file"] == str(ckpt) + ".rejected"
    assert summary["counts"]["scored"] == 3 and not ckpt.exists()
    assert "this is not a record" in (tmp_path / "judge.json.partial.jsonl.rejected").read_text()
    # a clean rerun reports none
    (tmp_path / "judge.json").unlink()
    assert run(tmp_path, server) == 0
    summary = load(tmp_path / "judge.json.summary.json")
    assert summary["checkpoint_rejected_lines"] == 0 and summary["checkpoint_torn_lines"] == 0
    assert "checkpoint_rejected_file" not in summary
