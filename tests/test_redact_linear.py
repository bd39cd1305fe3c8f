"""Issue 40 item 8: redaction is linear in the text's length, a reply is cut to its cap before anything scans it,
and a stop signal is honoured while replies are read and redacted (a regex quadratic on a long run of letters
held the interpreter for minutes on one long reply: 0.3 / 1.5 / 5.1 s for 10k / 20k / 40k characters)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.fake_openai_server import FakeOpenAIServer, Fault, Reply
from tests.test_judge_run import FAST, good, make_records, write_eval
from tests.test_judge_stage import KEY, api_key, start, wait_for  # noqa: F401 (api_key: an autouse fixture)

SHAPES = {
    "one letter": "x" * 1_000_000,
    "letters and digits": "a1" * 500_000,
    "scheme-like words": "http" * 250_000,
    "schemes": "x://" * 250_000,
    "basic auth word": "basic " + "A" * 1_000_000 + "===",
    "bearer words": "bearer " * 150_000,
    "an open JSON string": '{"' + "a" * 1_000_000,
    "JSON pairs": '"a": "b", ' * 100_000,
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_redacting_a_megabyte_takes_well_under_a_few_seconds(shape, repo_root):
    """1 MB of each shape through every route of the redactor, in a child with a deadline (the quadratic regex
    took hours on 1 MB; linear, it takes tens of milliseconds: the bound is generous for a loaded machine)."""
    code = ("import sys, time; from k9bench import redact; text = sys.stdin.read(); t = time.perf_counter(); "
            "redact.redact(text); redact.redact_argv([text]); print(time.perf_counter() - t)")
    done = subprocess.run([sys.executable, "-c", code], input=SHAPES[shape], capture_output=True, text=True, timeout=120,
                          cwd=repo_root, env={**os.environ, "PYTHONPATH": str(repo_root)})
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) < 10.0


def test_the_redactor_still_masks_url_credentials_at_any_position():
    from k9bench.redact import MASK, redact_text

    assert redact_text("a http://user:pw123456@host/x, xhttps://key123456@h and (ftp://u:p@h)") == \
        f"a http://{MASK}@host/x, xhttps://{MASK}@h and (ftp://{MASK}@h)"


def test_a_reply_is_cut_to_the_client_s_cap_before_it_is_scrubbed(monkeypatch):
    from k9bench.serving import openai_api
    from k9bench.serving.openai_api import ChatClient

    scanned: list[int] = []
    real_scrub = openai_api.scrub
    monkeypatch.setattr(openai_api, "scrub", lambda text, secret: (scanned.append(len(text)), real_scrub(text, secret))[1])
    with FakeOpenAIServer(lambda req: "y" * 3_000_000) as server:
        client = ChatClient(api_key=KEY, base_url=server.base_url, timeout=30, max_reply_chars=1000)
        result = client.chat([{"role": "user", "content": "hi"}], model="m")
    assert result.ok and len(result.text) == 1000 and result.reply_chars == 3_000_000
    assert scanned == [1000]


def test_the_judge_skips_a_huge_reply_as_too_large_naming_its_size(tmp_path):
    import subjective_evals

    def responder(req):
        return "z" * 2_000_000 if "Question 1:" in req.text else good(req)

    write_eval(tmp_path / "eval.json", make_records(3))
    with FakeOpenAIServer(responder) as server:
        started = time.monotonic()
        assert subjective_evals.main(["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"),
                                      "--base_url", server.base_url, *FAST, "-q"]) == 0
        assert time.monotonic() - started < 60
    skipped = json.loads((tmp_path / "judge_skipped.json").read_text())
    assert [(s["idx"], s["kind"], s["reply_chars"]) for s in skipped] == [(1, "reply_too_large", 2_000_000)]
    assert len(skipped[0]["raw_reply"]) < 10_000


def test_a_stop_signal_is_honoured_while_long_replies_are_read_and_redacted(tmp_path, repo_root):
    """SIGTERM while long replies arrive: exit 75 in seconds (it was ignored until each reply was redacted)."""
    write_eval(tmp_path / "eval.json", make_records(12))
    long_ones = threading.Semaphore(4)

    def responder(req):
        return Reply("x" * 4_000_000) if long_ones.acquire(blocking=False) else Fault(stall=60)

    with FakeOpenAIServer(responder) as server:
        argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"), "--base_url",
                server.base_url, *FAST, "--concurrency", "4", "--timeout", "60"]
        proc = start(repo_root, argv, tmp_path / "err.txt")
        try:
            wait_for(lambda: len(server.chat_requests()) >= 4, proc)
            time.sleep(0.5)  # the long replies are on their way in, or being redacted
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 75
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in (tmp_path / "err.txt").read_text()


def test_an_inference_reply_of_megabytes_is_cut_to_the_cap_before_it_is_scrubbed(demo_video_dir, tmp_path, monkeypatch, capfd):
    """The OpenAI backend gives :data:`MAX_REPLY_CHARS` to its client, as the judge does: a reply of 3 MB is cut before the
    key's scrub, its first characters are the answer, and the record says how long it was."""
    import eval_video_llm
    from k9bench.serving import openai_api
    from k9bench.serving.openai_api import MAX_REPLY_CHARS

    scanned: list[int] = []
    real_scrub = openai_api.scrub
    monkeypatch.setattr(openai_api, "scrub", lambda text, secret: (scanned.append(len(text)), real_scrub(text, secret))[1])
    out = tmp_path / "raw.json"
    with FakeOpenAIServer(lambda req: "w" * 3_000_000) as server:
        assert eval_video_llm.main(["--backend", "openai", "--api_model", "gpt-test", "--base_url", server.base_url, "--dataset_name",
                                    "demo", "--video_dir", str(demo_video_dir), "--output_file", str(out), "--max_samples", "2",
                                    "--max_frames", "2", "--retry_backoff", "0.01", "-q"]) == 0
    records = json.loads(out.read_text())["individual_results"]
    assert len(records) == 2
    for record in records:
        assert record["response"] == "w" * MAX_REPLY_CHARS and record["api_reply_chars"] == 3_000_000
    assert scanned and max(scanned) <= MAX_REPLY_CHARS
    assert "idx 0: the reply is 3000000 characters, over the 100000-character cap" in capfd.readouterr().err
