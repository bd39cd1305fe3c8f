"""Issue 31 item 1, a judge never pays twice: the store of paid replies (across output names, two
processes at once, --no_cache, a damaged stored reply), the meta's counts of reused and sent entries,
and the launcher's THRESHOLD rerun with the judge on. Every claim is a request count at the fake server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import subjective_evals
from k9bench.judge.cache import CACHE_DIR, request_key
from tests.fake_openai_server import FakeOpenAIServer
from tests.pipeline_fakes import fake, launcher_env  # noqa: F401 (fixtures)
from tests.test_judge_run import FAST, good, idx_of, make_records, write_eval
from tests.test_judge_stage import KEY, api_key, server  # noqa: F401 (fixtures: OPENAI_API_KEY=KEY, a fake judge)


def judge(folder: Path, server: FakeOpenAIServer, output: str, *extra: str) -> int:
    return subjective_evals.main(["--evaluations", str(folder / "eval.json"), "--output", str(folder / output), "--base_url",
                                  server.base_url, *FAST, "-q", *extra])


def run_block(folder: Path, output: str) -> dict:
    return json.loads((folder / f"{output}.meta.json").read_text())["run"]


def without_times(entries: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in ("timestamp", "from_reply_store")} for e in entries]


def test_a_reply_paid_under_one_output_name_serves_another_and_no_cache_pays_again(tmp_path, server):
    write_eval(tmp_path / "eval.json", make_records(5))
    assert judge(tmp_path, server, "a.json") == 0
    assert sorted(idx_of(r) for r in server.chat_requests()) == [0, 1, 2, 3, 4]
    stored = sorted((tmp_path / CACHE_DIR).glob("*.json"))
    assert len(stored) == 5 and all(json.loads(p.read_text())["key"] == p.stem for p in stored)
    assert KEY not in "".join(p.read_text() for p in stored)
    server.clear()

    assert judge(tmp_path, server, "b.json") == 0  # another output name: nothing paid again
    assert server.chat_requests() == []
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert without_times(a) == without_times(b) and all(e["from_reply_store"] for e in b)
    run = run_block(tmp_path, "b.json")
    assert (run["reused_from_store"], run["sent_this_run"], run["reused_entries"]) == (5, 0, 0)
    assert json.loads((tmp_path / "b.json.summary.json").read_text())["usage"]["this_run"]["requests"] == 0  # nothing paid

    assert judge(tmp_path, server, "c.json", "--no_cache") == 0  # the store off: every request is sent
    assert sorted(idx_of(r) for r in server.chat_requests()) == [0, 1, 2, 3, 4]
    assert (run_block(tmp_path, "c.json")["reused_from_store"], run_block(tmp_path, "c.json")["sent_this_run"]) == (0, 5)
    assert len(list((tmp_path / CACHE_DIR).glob("*.json"))) == 5  # --no_cache wrote nothing there either
    server.clear()

    records = make_records(5)
    records[3]["answer"] = "answer-3 the dog runs away"  # one new answer: one request
    write_eval(tmp_path / "eval.json", records)
    assert judge(tmp_path, server, "d.json") == 0
    assert [idx_of(r) for r in server.chat_requests()] == [3]
    assert (run_block(tmp_path, "d.json")["reused_from_store"], run_block(tmp_path, "d.json")["sent_this_run"]) == (4, 1)


def test_the_key_is_the_model_the_filled_prompt_and_the_sampling_sent():
    base = {"judge_model": "gpt-4o", "prompt": "Q A M", "params": {}}
    key = request_key(**base)
    assert request_key(**{**base, "params": {"max_tokens": 300}}) == key  # a larger cap does not change a whole reply
    for other in ({"judge_model": "gpt-4o-mini"}, {"prompt": "Q A M2"}, {"params": {"temperature": 0.0}}):
        assert request_key(**{**base, **other}) != key


def test_a_damaged_stored_reply_is_said_and_sent_again(tmp_path, server, capsys):
    write_eval(tmp_path / "eval.json", make_records(3))
    assert judge(tmp_path, server, "a.json") == 0
    damaged = sorted((tmp_path / CACHE_DIR).glob("*.json"))[0]
    damaged.write_text('{"key": "not this one"')
    server.clear()
    capsys.readouterr()
    assert subjective_evals.main(["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "b.json"),
                                  "--base_url", server.base_url, *FAST]) == 0
    assert len(server.chat_requests()) == 1
    err = capsys.readouterr().err
    assert f"judge reply store: {damaged}" in err and "sending that request again" in err and "Traceback" not in err
    assert json.loads(damaged.read_text())["key"] == damaged.stem  # rewritten whole by the paid reply


def test_two_judges_at_once_on_two_outputs_share_the_store_whole(tmp_path, server, repo_root):
    """Two processes paying for the same requests at once: both finish, each stored reply is one whole file."""
    write_eval(tmp_path / "eval.json", make_records(6))
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    procs = [subprocess.Popen([sys.executable, str(repo_root / "subjective_evals.py"), "--evaluations", str(tmp_path / "eval.json"),
                               "--output", str(tmp_path / name), "--base_url", server.base_url, *FAST, "-q"], env=env,
                              stderr=subprocess.PIPE, text=True) for name in ("x.json", "y.json")]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert all("Traceback" not in e for e in errs)
    stored = sorted((tmp_path / CACHE_DIR).glob("*"))
    assert len(stored) == 6 and all(json.loads(p.read_text())["key"] == p.stem for p in stored)  # no temp file left
    assert 6 <= len(server.chat_requests()) <= 12  # each request paid at most once per process
    x, y = (json.loads((tmp_path / n).read_text()) for n in ("x.json", "y.json"))
    assert [e["scores"] for e in x] == [e["scores"] for e in y]


def test_the_launcher_reruns_a_threshold_change_with_the_judge_on_without_a_request(fake, launcher_env, tmp_path, capsys,
                                                                                    monkeypatch):
    """`THRESHOLD=0.3 ... run_eval.sh` after a first run with the judge on: exit 0, the judge done, 0 requests.
    The stages before the judge are stand-ins; the judge is the real JudgeStage against the fake server."""
    from k9bench.pipeline import main
    from tests.pipeline_fakes import option, use_fakes

    def with_real_eval(script: str, argv: list[str]) -> int:
        code = fake(script, argv)
        if script == "evaluate_results" and option(argv, "--mode") == "evaluate":
            path = write_eval(Path(option(argv, "--output_file")), make_records(4))
            data = json.loads(path.read_text())
            data["threshold"] = float(option(argv, "--threshold"))  # the verdicts change, not the answers
            path.write_text(json.dumps(data))
        return code

    use_fakes(monkeypatch, with_real_eval, real=("judge",))
    with FakeOpenAIServer(good) as server:
        launcher_env(JUDGE_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REPORT="0")
        assert main([]) == 0, capsys.readouterr().out[-3000:]
        assert sorted(idx_of(r) for r in server.chat_requests()) == [0, 1, 2, 3]
        capsys.readouterr()
        server.clear()
        launcher_env(JUDGE_BASE_URL=server.base_url, OPENAI_API_KEY=KEY, REPORT="0", THRESHOLD="0.3")
        code = main([])
        out = capsys.readouterr().out
        assert code == 0, out[-3000:]
        assert server.chat_requests() == []
    assert "step evaluate: runs: " in out and "step judge: done already, skipping" in out, out


def test_new_answers_judged_before_a_stop_still_set_the_old_file_aside(tmp_path, server):
    """The changed entry's new judgement is in the checkpoint (a run stopped after it): the rerun sends
    nothing, and the earlier judge file, which held the old judgement, is still kept aside."""
    write_eval(tmp_path / "eval.json", make_records(3))
    assert judge(tmp_path, server, "judge.json", "--no_cache") == 0
    before = (tmp_path / "judge.json").read_bytes()
    records = make_records(3)
    records[1]["answer"] = "answer-1 the dog barks"
    write_eval(tmp_path / "eval.json", records)
    assert judge(tmp_path, server, "other.json", "--no_cache") == 0  # the new judgement of idx 1, made elsewhere
    new_entry = json.loads((tmp_path / "other.json").read_text())[1]
    fingerprint = json.loads((tmp_path / "other.json.meta.json").read_text())["judge"]["fingerprint"]
    (tmp_path / "judge.json.partial.jsonl").write_text(
        json.dumps({"idx": 1, "fingerprint": fingerprint, "status": "scored", "entry": new_entry}) + "\n")
    server.clear()
    assert judge(tmp_path, server, "judge.json", "--no_cache") == 0
    assert server.chat_requests() == []
    aside = list(tmp_path.glob("judge.json.replaced-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == before
    assert json.loads((tmp_path / "judge.json").read_text())[1]["model_output"] == "answer-1 the dog barks"


def test_a_store_that_cannot_be_searched_is_one_warning_and_every_request_is_sent(tmp_path, server, capsys, monkeypatch):
    """Issue 40 item 9: another user's .judge_cache (mode 000; simulated, as root reads any mode) ended the
    judge with a PermissionError traceback from judge/cache.py; now one warning, and the requests are sent."""
    import pathlib

    write_eval(tmp_path / "eval.json", make_records(4))
    store = tmp_path / CACHE_DIR
    store.mkdir()
    real_is_file = pathlib.Path.is_file

    def denied(self):
        if self.parent == store:
            raise PermissionError(13, "Permission denied", str(self))
        return real_is_file(self)

    monkeypatch.setattr(pathlib.Path, "is_file", denied)
    capsys.readouterr()
    assert subjective_evals.main(["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "a.json"),
                                  "--base_url", server.base_url, *FAST]) == 0
    assert len(server.chat_requests()) == 4
    err = capsys.readouterr().err
    assert err.count(f"judge reply store: {store} cannot be searched") == 1 and "Traceback" not in err


def test_a_paid_reply_is_stored_before_the_record_that_uses_it(tmp_path, server, monkeypatch):
    """Issue 40 item 9: a kill between the two must not pay again: when a scored record reaches the checkpoint,
    its reply is already in the store."""
    import k9bench.judge.run as judge_run

    write_eval(tmp_path / "eval.json", make_records(3))
    seen: list[bool] = []
    real_take = judge_run._take

    def take(outcome, task, record, *args):
        if outcome.entry is not None and not outcome.from_store:
            seen.append(any((tmp_path / CACHE_DIR).glob(f"{outcome.entry.extra['request_sha256']}.json")))
        return real_take(outcome, task, record, *args)

    monkeypatch.setattr(judge_run, "_take", take)
    assert judge(tmp_path, server, "a.json") == 0
    assert seen == [True, True, True]


def test_temporary_files_of_a_killed_write_are_removed_at_the_next_start(tmp_path, server):
    """Issue 40 item 9: a SIGKILL during the judge's last writes left ``.a.json.summary.json.*.tmp`` behind, still
    there after the rerun."""
    from k9bench.judge.settings import RunPaths

    write_eval(tmp_path / "eval.json", make_records(2))
    paths = RunPaths(output=tmp_path / "a.json", skipped=tmp_path / "a.skipped.json")
    left = [p.parent / f".{p.name}.x1y2z3.tmp" for p in (paths.summary, paths.meta, paths.output)]
    for p in left:
        p.write_text("half")
    other = tmp_path / ".unrelated.json.abc.tmp"  # not one of this run's outputs: left alone
    other.write_text("x")
    assert judge(tmp_path, server, "a.json", "--skipped", str(paths.skipped)) == 0
    assert [p.exists() for p in left] == [False, False, False] and other.exists()
