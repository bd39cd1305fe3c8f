"""Canary secrets (issue 15 item 9): a key passed through each route never reaches a file written or a
log line, for the judge (subjective_evals.py) and the OpenAI inference backend (eval_video_llm.py
--backend openai), each run as a user runs it (a real process, debug logs on) against the fake server.

Routes: the environment (``OPENAI_API_KEY``), URL userinfo (``--base_url http://user:KEY@host``, which
the HTTP client turns into a Basic authorization header), ``--extra_body '{"api_key": KEY}'`` (the
backend's only; the judge has no such flag), and a secret-looking flag that does not exist
(``--api_key KEY``, which argparse would echo).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from k9bench.redact import MASK, redact, redact_argv, redact_text, register_url_secrets
from tests.fake_openai_server import FakeOpenAIServer, Fault, Reply
from tests.test_judge_run import good, idx_of, make_records, write_eval

CANARY = "sk-canary-5f4e3d2c1b0a99887766"


def leaks(text: str) -> list[str]:
    """The forms of the canary found in ``text`` (itself, and inside a Basic authorization value)."""
    forms = [CANARY, base64.b64encode(f"user:{CANARY}".encode()).decode(), base64.b64encode(f"{CANARY}:".encode()).decode()]
    return [f for f in forms if f in text]


def assert_clean(folder: Path, *streams: str, skip: tuple = ()) -> list[Path]:
    written = [p for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip]
    for path in written:
        assert not leaks(path.read_text(encoding="utf-8", errors="replace")), path
    for n, text in enumerate(streams):
        assert not leaks(text), f"stream {n}: {[line for line in text.splitlines() if leaks(line)][:3]}"
    return written


def with_userinfo(url: str, userinfo: str) -> str:
    return url.replace("http://", f"http://{userinfo}@", 1)


def run_script(repo: Path, script: str, args: list[str], env_key: str | None, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["K9BENCH_NO_PROGRESS"] = "1"
    if env_key is not None:
        env["OPENAI_API_KEY"] = env_key
    return subprocess.run([sys.executable, str(repo / script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# -- the judge ------------------------------------------------------------------------------------


def echoing(req):
    """A responder that puts whatever authorization it received into an error, a reply and a CoT."""
    auth = req.headers.get("authorization", "")
    i = idx_of(req)
    if i == 1:
        return Fault(401, body=json.dumps({"error": {"message": f"bad credentials: {auth}"}}))
    if i == 2:
        return Reply(f"I was called with {auth} and cannot score this.")
    if i == 3:
        return Reply(f"CoT: called with {auth}\n{{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}}")
    return good(req)


JUDGE_ROUTES = [
    # (route, env key, userinfo in --base_url)
    ("environment", CANARY, None),
    ("url userinfo user:key", None, f"user:{CANARY}"),
    ("url userinfo key only", None, CANARY),
    ("environment and url userinfo", CANARY, f"user:{CANARY}"),
]


@pytest.mark.parametrize("route, env_key, userinfo", JUDGE_ROUTES, ids=[r[0] for r in JUDGE_ROUTES])
def test_judge_writes_and_logs_no_secret(route, env_key, userinfo, tmp_path, repo_root):
    write_eval(tmp_path / "eval.json", make_records(6))
    with FakeOpenAIServer(echoing) as server:
        url = with_userinfo(server.base_url, userinfo) if userinfo else server.base_url
        args = ["--evaluations", "eval.json", "--base_url", url, "--max_retries", "0", "--retry_backoff", "0.01", "-v", "-v"]
        proc = run_script(repo_root, "subjective_evals.py", args, env_key, tmp_path)
        requests = server.chat_requests()
    assert proc.returncode == 0, proc.stderr  # idx 1 (401) and 2 (no scores) skipped: exit 0, as the reference
    assert requests and "DEBUG" in proc.stderr  # the key was used, library logs were on
    sent = {r.headers.get("authorization", "") for r in requests}
    assert all(CANARY in s or leaks(s) for s in sent)  # the canary did travel: the test is not vacuous
    written = assert_clean(tmp_path, proc.stdout, proc.stderr, skip=("eval.json",))
    names = {p.name for p in written}
    assert {"judge_eval.json", "judge_eval_skipped.json", "judge_eval.json.meta.json", "judge_eval.json.summary.json"} <= names
    skipped = {s["idx"]: s for s in json.loads((tmp_path / "judge_eval_skipped.json").read_text())}
    assert MASK in skipped[1]["error"] and MASK in skipped[2]["raw_reply"]  # masked, not dropped
    meta = json.loads((tmp_path / "judge_eval.json.meta.json").read_text())
    if userinfo:
        assert meta["judge"]["base_url"].startswith(f"http://{MASK}@") and meta["judge"]["base_url_used"].startswith(f"http://{MASK}@")
        assert f"http://{MASK}@" in " ".join(meta["provenance"]["argv"])


def test_judge_checkpoint_and_unreachable_stop_hold_no_secret(tmp_path, repo_root):
    """An endpoint that refuses every connection: the probe stops the run before the first question with
    an error line naming the endpoint, which does not hold the key given in the URL; nothing is written."""
    write_eval(tmp_path / "eval.json", make_records(12))
    down = FakeOpenAIServer(good)
    down.start()
    dead = with_userinfo(down.base_url, f"user:{CANARY}")
    down.stop()
    args = ["--evaluations", "eval.json", "--base_url", dead, "--max_retries", "0", "--concurrency", "1", "-v"]
    proc = run_script(repo_root, "subjective_evals.py", args, CANARY, tmp_path)
    assert proc.returncode == 2 and "does not answer" in proc.stderr and f"http://{MASK}@" in proc.stderr
    written = assert_clean(tmp_path, proc.stdout, proc.stderr, skip=("eval.json",))
    assert written == []


def test_a_secret_flag_that_does_not_exist_is_not_echoed(tmp_path, repo_root):
    write_eval(tmp_path / "eval.json", make_records(2))
    for extra in (["--api_key", CANARY], [f"--api_key={CANARY}"], ["--openai_api_key", CANARY]):
        proc = run_script(repo_root, "subjective_evals.py", ["--evaluations", "eval.json", *extra], None, tmp_path)
        assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr and MASK in proc.stderr
        assert_clean(tmp_path, proc.stdout, proc.stderr, skip=("eval.json",))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.json"]


# -- the OpenAI inference backend -----------------------------------------------------------------


def reply(req) -> str:
    auth = req.headers.get("authorization", "")
    return json.dumps({"reasoning": f"the header was {auth}", "answer": "it moves steadily"})


BACKEND_ROUTES = [
    # (route, env key, userinfo, extra flags)
    ("environment", CANARY, None, []),
    ("url userinfo", None, f"user:{CANARY}", []),
    ("extra_body", "sk-other-key-not-the-canary", None, ["--extra_body", json.dumps({"api_key": CANARY, "metadata": {"token": CANARY}})]),
]


@pytest.mark.parametrize("route, env_key, userinfo, extra", BACKEND_ROUTES, ids=[r[0] for r in BACKEND_ROUTES])
def test_openai_backend_writes_and_logs_no_secret(route, env_key, userinfo, extra, tmp_path, repo_root, demo_video_dir):
    out = tmp_path / "out"
    out.mkdir()
    with FakeOpenAIServer(reply) as server:
        url = with_userinfo(server.base_url, userinfo) if userinfo else server.base_url
        args = ["--backend", "openai", "--api_model", "gpt-test", "--base_url", url, "--dataset_name", "demo",
                "--video_dir", str(demo_video_dir), "--output_file", str(out / "raw.json"), "--max_samples", "2",
                "--max_frames", "2", "--retry_backoff", "0.01", "-v", *extra]
        proc = run_script(repo_root, "eval_video_llm.py", args, env_key, tmp_path)
        requests = server.chat_requests()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert requests and any(leaks(json.dumps(r.body)) or leaks(r.headers.get("authorization", "")) for r in requests)
    written = assert_clean(out, proc.stdout, proc.stderr)
    assert "raw.json" in {p.name for p in written}


# -- the redaction helpers themselves ---------------------------------------------------------------


def test_redaction_by_name_and_by_value():
    register_url_secrets(f"https://user:{CANARY}-url@example.org/v1")
    assert redact_text(f"key={CANARY}-url in text") == f"key={MASK} in text"
    assert redact_text(f"http://u:{CANARY}@h/v1") == f"http://{MASK}@h/v1"
    assert redact_text("Authorization: Basic " + base64.b64encode(b"u:p4ssw0rd").decode()) == f"Authorization: Basic {MASK}"
    assert redact_text("the dog shows basic understanding") == "the dog shows basic understanding"
    assert redact({"api_key": "abc", "max_tokens": 300, "nested": [{"hf_token": "x"}]}) == {"api_key": MASK, "max_tokens": 300, "nested": [{"hf_token": MASK}]}
    assert redact_argv(["--api_key", "v", "--extra_body", '{"api_key": "v2"}', "--max_tokens", "5"]) == [
        "--api_key", MASK, "--extra_body", f'{{"api_key": "{MASK}"}}', "--max_tokens", "5"]
