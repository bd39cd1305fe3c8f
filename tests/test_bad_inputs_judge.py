"""Issue 15 for the judge: every bad input refused before the first request (exit 2, one line naming
the culprit, no traceback, nothing written, earlier outputs unchanged), and malformed 200 replies
turned into skipped entries with a clear reason instead of a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import subjective_evals
from tests.fake_openai_server import FakeOpenAIServer, Fault, RecordedRequest, Reply
from tests.test_judge_run import FAST, good, idx_of, make_records, write_eval
from tests.test_judge_stage import KEY, api_key, server  # noqa: F401 (fixtures: OPENAI_API_KEY=KEY, a fake judge)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def call(argv: list[str]) -> int:
    try:
        return subjective_evals.main(argv)
    except SystemExit as exc:  # argparse's exit
        return int(exc.code)


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if " ERROR " in line or ": error: " in line]


@pytest.fixture
def workdir(tmp_path, server):
    """A folder holding an evaluations file and the complete outputs of an earlier good run."""
    write_eval(tmp_path / "eval.json", make_records(4))
    base = ["--evaluations", str(tmp_path / "eval.json"), "--base_url", server.base_url, *FAST, "-q"]
    assert call([*base, "--output", str(tmp_path / "earlier.json")]) == 0
    server.clear()
    return tmp_path


def _nan_record(field: str):
    def edit(folder: Path) -> list[str]:
        records = make_records(4)
        records[2][field] = float("nan")
        path = folder / "bad.json"
        path.write_text(json.dumps({"individual_results": records}))  # json writes NaN, as numpy-based tools do
        return ["--evaluations", str(path)]

    return edit


def _record_value(field: str, value):
    def edit(folder: Path) -> list[str]:
        records = make_records(4)
        records[1][field] = value
        path = folder / "bad.json"
        path.write_text(json.dumps({"individual_results": records}))
        return ["--evaluations", str(path)]

    return edit


def _record_edit(change):
    def edit(folder: Path) -> list[str]:
        records = make_records(4)
        change(records[1])
        path = folder / "bad.json"
        path.write_text(json.dumps({"individual_results": records}))
        return ["--evaluations", str(path)]

    return edit


def _latin1_prompt(folder: Path) -> list[str]:
    path = folder / "prompt.txt"
    path.write_bytes("Frage {question} \xe4 {correct_answer} {model_output}".encode("latin-1"))
    return ["--prompt_file", str(path)]


def _file(name: str, data: bytes):
    def edit(folder: Path) -> list[str]:
        (folder / name).write_bytes(data)
        return ["--evaluations", str(folder / name)]

    return edit


def _symlink_loop(folder: Path) -> list[str]:
    (folder / "loop.json").symlink_to(folder / "loop2.json")
    (folder / "loop2.json").symlink_to(folder / "loop.json")
    return ["--evaluations", str(folder / "loop.json")]


def _prompt(text: str):
    def edit(folder: Path) -> list[str]:
        (folder / "prompt.txt").write_text(text)
        return ["--prompt_file", str(folder / "prompt.txt")]

    return edit


def _args(*extra: str):
    return lambda folder: [a.replace("{dir}", str(folder)) for a in extra]


BAD = [
    # (case, argv edit, culprit fragments in the one error line)
    ("output is the current folder", _args("--output", "."), ["--output .", "not a file name"]),
    ("output is a folder", _args("--output", "{dir}"), ["--output", "is a folder"]),
    ("output in a read-only folder", _args("--output", "/sys/judge.json"), ["--output /sys/judge.json", "/sys is not writable"]),
    ("output under a file", _args("--output", "{dir}/eval.json/judge.json"), ["--output", "eval.json is a file, not a folder"]),
    ("output is a device", _args("--output", "/dev/null"), ["--output /dev/null", "not a regular file"]),
    ("output is the input", _args("--output", "{dir}/eval.json"), ["--output", "is the input file"]),
    ("skipped in a read-only folder", _args("--skipped", "/sys/skipped.json"), ["--skipped /sys/skipped.json", "not writable"]),
    ("skipped is the output", _args("--output", "{dir}/j.json", "--skipped", "{dir}/j.json"), ["--skipped", "is also --output"]),
    ("skipped is the output's sidecar", _args("--output", "{dir}/j.json", "--skipped", "{dir}/j.json.meta.json"), ["--skipped", "meta sidecar"]),
    ("NaN answer", _nan_record("answer"), ["bad.json", "idx 2", "answer is nan"]),
    ("NaN question", _nan_record("question"), ["bad.json", "idx 2", "question is nan"]),
    ("dict answer", _record_value("answer", {"text": "sits"}), ["bad.json", "idx 1", "answer is {'text': 'sits'}"]),
    ("number answer", _record_value("answer", 7), ["bad.json", "idx 1", "answer is 7"]),
    ("list question", _record_value("question", ["what?"]), ["bad.json", "idx 1", "question is ['what?']"]),
    ("idx that is text", _record_value("idx", "seven"), ["bad.json", "record #1", "idx 'seven' is not an integer"]),
    # issue 31 item 3: what the scoring refuses (scoring.rule.check_record), refused before any paid request
    ("record without an answer", _record_edit(lambda r: r.pop("answer")), ["bad.json", "idx 1 (record #1)", "no 'answer'"]),
    ("record with 4 options", _record_edit(lambda r: r.update(options=r["options"][:4])), ["bad.json", "idx 1 (record #1)", "4 options"]),
    ("record with 6 options", _record_edit(lambda r: r.update(options=[*r["options"], "F. option F"])),
     ["bad.json", "idx 1 (record #1)", "6 options"]),
    ("unknown secret flag", _args("--api_key", "sk-live-canary-do-not-echo-123"), ["unrecognized arguments: --api_key ***"]),
    ("unknown secret flag with =", _args("--api_key=sk-live-canary-do-not-echo-123"), ["unrecognized arguments: --api_key=***"]),
    ("temperature NaN", _args("--temperature", "nan"), ["--temperature", "finite"]),
    ("timeout inf", _args("--timeout", "inf"), ["--timeout", "finite"]),
    ("concurrency 0", _args("--concurrency", "0"), ["--concurrency", ">= 1"]),
    ("negative limit", _args("--limit", "-10"), ["--limit", ">= 1"]),
    # issue 23: --limit 0 judged nothing and wrote empty judge files, exit 0
    ("limit 0", _args("--limit", "0"), ["argument --limit", "expected an integer >= 1, got '0'"]),
    ("prompt file missing", _args("--prompt_file", "{dir}/nope.txt"), ["nope.txt"]),
    ("prompt file not UTF-8", _latin1_prompt, ["--prompt_file", "prompt.txt", "not UTF-8"]),
    ("evaluations is a folder", _args("--evaluations", "{dir}"), ["--evaluations", "is a folder, not a file"]),
    # issue 23: every fault of the evaluations file is one line naming it (never "--prompt_file None")
    ("evaluations not UTF-8", _file("bad.json", b'{"individual_results": ["\xff\xfe"]}'), ["--evaluations", "bad.json", "not UTF-8"]),
    ("evaluations binary", _file("bad.json", bytes(range(256)) * 4), ["--evaluations", "bad.json"]),
    ("evaluations nested too deeply", _file("bad.json", b"[" * 200_000), ["--evaluations", "bad.json", "nested too deeply"]),
    ("evaluations empty", _file("bad.json", b""), ["--evaluations", "bad.json", "empty"]),
    ("evaluations a symlink loop", _symlink_loop, ["--evaluations", "loop.json", "symbolic link loop"]),
    ("evaluations without records", _file("bad.json", b'{"individual_results": []}'), ["bad.json", "no records"]),
    # issue 23: a format spec that would build a 100 GB string is refused before any request
    ("template with a huge format spec", _prompt("{question} {correct_answer} {model_output:>99999999999}"),
     ["prompt.txt", "{model_output} carry a format spec"]),
    ("empty prompt file", _prompt(""), ["--prompt_file", "prompt.txt", "the file is empty"]),
    # issue 23 / 25: a --base_url without a scheme is exit 2 at once (it was retried for minutes)
    ("base_url without a scheme", _args("--base_url", "localhost:8000/v1"), ["--base_url", "localhost:8000/v1", "http://"]),
]


@pytest.mark.parametrize("case, edit, fragments", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_refused_before_any_request(case, edit, fragments, workdir, server, capsys):
    extra = edit(workdir)
    before = snapshot(workdir)  # the edit may have added the bad input file itself
    capsys.readouterr()
    argv = ["--evaluations", str(workdir / "eval.json"), "--base_url", server.base_url, *FAST, *extra]
    assert call(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = error_lines(err)
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "--prompt_file None" not in err
    assert "sk-live-canary" not in err
    assert snapshot(workdir) == before  # nothing written, earlier outputs unchanged
    assert server.chat_requests() == []  # no request was paid for


def test_output_dot_in_a_real_process_is_one_line(workdir, server, repo_root):
    """The README's promise, checked as a user meets it: exit 2 and one line, no ValueError about an empty name."""
    before = snapshot(workdir)
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    proc = subprocess.run([sys.executable, str(repo_root / "subjective_evals.py"), "--evaluations", "eval.json", "--output", ".",
                           "--base_url", server.base_url], cwd=workdir, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--output .: not a file name" in proc.stderr and "PosixPath" not in proc.stderr
    assert snapshot(workdir) == before and server.chat_requests() == []


# -- malformed but well-formed 200 replies: skipped with a reason, never a crash -------------------


def completion(content, usage=None) -> Fault:
    """A 200 chat completion with any ``content`` and ``usage`` (sent as given)."""
    body = {"id": "chatcmpl-odd", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage if usage is not None else {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    return Fault(malformed=True, body=json.dumps(body))


ODD_REPLIES = [
    # (case, reply, reason fragment)
    ("content is an integer", completion(8), "content is 8 (type int), not text"),
    ("content is a list", completion([{"type": "text", "text": "CoT: x {'Logic': 8}"}]), "(type list), not text"),
    ("content is an object", completion({"Logic": 8}), "(type dict), not text"),
    ("usage count is text", completion("CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}",
                                       {"prompt_tokens": "many", "completion_tokens": 5, "total_tokens": 15}), "usage.prompt_tokens is 'many'"),
    ("usage is a string", completion("CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}", "lots"),
     "usage is 'lots'"),
    ("usage count is negative", completion("CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}",
                                           {"prompt_tokens": -3}), "usage.prompt_tokens is -3"),
]


@pytest.mark.parametrize("case, reply, reason", ODD_REPLIES, ids=[c[0] for c in ODD_REPLIES])
def test_odd_200_reply_is_a_skipped_entry_with_its_reason(case, reply, reason, tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(3))

    def respond(req: RecordedRequest):
        return reply if idx_of(req) == 1 else good(req)

    server.responder = respond
    argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"), "--base_url", server.base_url, *FAST]
    assert call(argv) == 0  # skipped entries: exit 0, as the reference (issue 24 item 1)
    err = capsys.readouterr().err
    assert "Traceback" not in err and reason in err
    skipped = json.loads((tmp_path / "judge_skipped.json").read_text())
    assert [s["idx"] for s in skipped] == [1]
    assert skipped[0]["kind"] == "api_error" and skipped[0]["error_kind"] == "bad_response" and reason in skipped[0]["error"]
    assert [idx_of(r) for r in server.chat_requests()].count(1) == 1  # the server answered: not asked again
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == [0, 2]
    # a rerun against a sane server scores it
    server.responder = good
    assert call(argv) == 0
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == [0, 1, 2]


def test_openai_backend_gets_the_same_clear_reason():
    """The OpenAI inference backend shares the client: its failed record carries the reason, not
    ``'int' object has no attribute 'strip'``."""
    import random

    from k9bench.serving.openai_api import ChatClient, RetryPolicy

    with FakeOpenAIServer(lambda req: completion(5)) as s:
        client = ChatClient(api_key=KEY, base_url=s.base_url, retry=RetryPolicy(max_retries=2, backoff_base=0.01), rng=random.Random(0))
        result = client.chat([{"role": "user", "content": "hi"}], model="m")
        assert len(s.chat_requests()) == 1
    assert not result.ok and result.error_kind == "bad_response" and result.attempts == 1
    assert "content is 5 (type int), not text" in result.error
    assert result.usage.total_tokens == 15  # the tokens it reported are still counted


def test_null_content_is_an_empty_reply_not_a_failure(server):
    """Reply(text=None) (a null content) stays an empty reply, not a failure."""
    import random

    from k9bench.serving.openai_api import ChatClient, RetryPolicy

    server.responder = lambda req: Reply(None)
    client = ChatClient(api_key=KEY, base_url=server.base_url, retry=RetryPolicy(max_retries=0), rng=random.Random(0))
    result = client.chat([{"role": "user", "content": "hi"}], model="m")
    assert result.ok and result.text == ""


def test_a_5_mb_reply_is_a_clear_skipped_entry_not_a_hang(tmp_path, server, capsys):
    """Issue 23: a huge reply is not parsed (the reply size cap): a skipped entry saying so, with the
    start of the reply kept, and the rest of the run goes on; a rerun against a sane server scores it."""
    from k9bench.judge import MAX_REPLY_CHARS

    write_eval(tmp_path / "eval.json", make_records(3))
    huge = "CoT: " + ("\n" * 1000 + "{'Logic': " + "9" * 1000) * 2500  # 5 MB of newlines and braces
    assert len(huge) > 5_000_000
    server.responder = lambda req: Reply(huge) if idx_of(req) == 1 else good(req)
    argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"), "--base_url", server.base_url, *FAST]
    assert call(argv) == 0
    skipped = json.loads((tmp_path / "judge_skipped.json").read_text())
    assert [s["idx"] for s in skipped] == [1] and skipped[0]["kind"] == "reply_too_large"
    assert f"reply too large: {len(huge)} characters, over the {MAX_REPLY_CHARS}-character cap" in skipped[0]["error"]
    assert skipped[0]["raw_reply"] == huge[:4000] and (tmp_path / "judge_skipped.json").stat().st_size < 50_000
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == [0, 2]
    assert "Traceback" not in capsys.readouterr().err
    server.responder = good
    assert call(argv) == 0
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == [0, 1, 2]


def test_a_full_disk_while_writing_the_lock_is_one_line_naming_it(workdir, server, capsys, monkeypatch):
    """Issue 31 item 3: ENOSPC from os.write of the lock file was a traceback; now one line naming the lock
    file and the free space (artifact_io's full-disk message), exit 1 as the other stages', no request, no lock left."""
    import errno

    real_write = os.write

    def full_for_locks(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".lock"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_for_locks)
    before = snapshot(workdir)
    capsys.readouterr()
    assert call(["--evaluations", str(workdir / "eval.json"), "--output", str(workdir / "j.json"), "--base_url", server.base_url,
                 *FAST]) == 1
    err = capsys.readouterr().err
    lines = error_lines(err)
    assert "Traceback" not in err and len(lines) == 1, err
    assert f"{workdir / 'j.json.lock'}: cannot write: no space left on device" in lines[0] and "free in" in lines[0]
    assert snapshot(workdir) == before and not list(workdir.glob("*.lock")) and server.chat_requests() == []


@pytest.mark.parametrize("base_url", [[], ["--base_url", ""]], ids=["no --base_url", "an empty --base_url"])
def test_no_key_names_the_missing_key(tmp_path, monkeypatch, capsys, base_url):
    """Issue 31 item 3: with no OPENAI_API_KEY, an empty --base_url (a script's unset variable) said "expected an
    http:// URL ... got ''"; now, as without --base_url, the one line names the missing key (exit 2, no request)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    write_eval(tmp_path / "eval.json", make_records(2))
    before = snapshot(tmp_path)
    code = call(["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"), *base_url, "-q"])
    lines = error_lines(capsys.readouterr().err)
    assert code == 2 and len(lines) == 1 and "OPENAI_API_KEY is not set" in lines[0], lines
    assert "got ''" not in lines[0]
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("ground_truth", ["b", "B", " b", "z", "", None, 2, "bc"])
def test_the_judge_refuses_a_ground_truth_exactly_when_scoring_does(ground_truth, tmp_path):
    """Issue 40 item 2: the judge's check before paying is scoring's own (one reading, normalisation
    included): a lower-case "b" that scoring upper-cases is judged, not refused with exit 2."""
    from k9bench.judge.tasks import build_tasks
    from k9bench.judge.settings import JudgeInputError
    from k9bench.scoring.rule import check_record, load_for_scoring
    from k9bench.scoring.settings import ScoringError

    records = make_records(4)
    records[1]["ground_truth"] = ground_truth
    path = write_eval(tmp_path / "eval.json", records)
    try:
        artifact, rows = load_for_scoring(path)
        for record, row in zip(artifact.records, rows):
            check_record(record, row, "x")
        scoring_refuses = False
    except ScoringError:
        scoring_refuses = True
    try:
        taskset = build_tasks(path)
        judge_refuses = False
    except JudgeInputError:
        judge_refuses = True
    assert judge_refuses == scoring_refuses
    if not judge_refuses:
        assert [t.ground_truth for t in taskset.tasks] == ["A", "B", "C", "D"]


def test_a_lower_case_ground_truth_is_judged_end_to_end(tmp_path, server):
    """Issue 40 item 2, as the new user met it: subjective_evals.py on a file with ground truth "b" exits 0
    and judges every record (it refused the file with exit 2 before)."""
    records = make_records(4)
    records[1]["ground_truth"] = "b"
    write_eval(tmp_path / "eval.json", records)
    argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"),
            "--base_url", server.base_url, *FAST, "-q"]
    assert call(argv) == 0
    assert len(server.chat_requests()) == 4
