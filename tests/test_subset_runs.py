"""Subsets from end to end (issue 37 item 5): the short-video subset written from the videos' durations,
``--subset`` on inference (only those questions run; the fingerprint holds the subset's hash), on the judge
(only those paid for, counted at the fake server) and in the report's judge table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import eval_video_llm
import subjective_evals
from k9bench.data.subset import main as subset_main
from k9bench.data.subset import read_subset
from k9bench.report import build_report, write_report
from tests.fake_openai_server import FakeOpenAIServer, fake_openai  # noqa: F401
from tests.test_judge_run import good, make_records
from tests.test_judge_run import write_eval as write_judge_input
from tests.test_openai_backend_runs import openai_args, reply
from tests.test_report import make_eval, make_judge


def short_subset(tmp_path: Path, video_dir: Path, name: str = "short.json", seconds: str = "6.5") -> Path:
    out = tmp_path / name
    assert subset_main(["--short_videos", str(video_dir), "--dataset_name", "demo", "--max_seconds", seconds, "--output", str(out)]) == 0
    return out


def test_short_video_subset_from_the_durations(tmp_path, demo_video_dir, capsys, caplog):
    """demoVid0001 lasts 6 s, demoVid0002 5 s, demoVid0003 8 s: under 6.5 s, the first two videos' 8 questions."""
    path = short_subset(tmp_path, demo_video_dir)
    data = json.loads(path.read_text())
    assert data["subset"] == {"idx": list(range(8)), "count": 8}
    assert data["videos"] | {"folder": None} == {"folder": None, "dataset_videos": 3, "found": 3, "shorter": 2, "max_seconds": 6.5,
                                                 "unreadable": [], "missing": 0}
    assert read_subset(path).sha256 == data["sha256"]
    assert "the 8 questions whose video is shorter than 6.5 s (2 of the 3 videos found" in capsys.readouterr().out
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    shutil.copy(demo_video_dir / "demoVid0002.mp4", fewer)
    (fewer / "demoVid0003.mp4").write_bytes(b"not a video")
    data = json.loads(short_subset(tmp_path, fewer, "fewer.json").read_text())
    assert data["subset"]["idx"] == [4, 5, 6, 7]  # a run on fewer videos gives fewer questions, and says how many it found
    assert (data["videos"]["found"], data["videos"]["missing"], data["videos"]["unreadable"]) == (1, 1, ["demoVid0003"])
    assert "1 of the dataset's 3 videos are in" in caplog.text
    # the default cut is the paper's 150 s: every demo video is shorter
    assert subset_main(["--short_videos", str(demo_video_dir), "--dataset_name", "demo", "--output", str(tmp_path / "all.json")]) == 0
    assert json.loads((tmp_path / "all.json").read_text())["subset"]["count"] == 12


def test_short_video_subset_refuses_bad_inputs_in_one_line(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert subset_main(["--short_videos", str(tmp_path / "nowhere"), "--dataset_name", "demo", "--output", str(out)]) == 2
    assert subset_main(["--short_videos", str(tmp_path), "--dataset_name", "demo", "--max_seconds", "0", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--short_videos" in err[0] and "--max_seconds 0" in err[1]
    assert not out.exists()


def test_inference_runs_only_the_subset_and_fingerprints_it(fake_openai, demo_video_dir, tmp_path):
    fake_openai.responder = reply
    subset = tmp_path / "idx.txt"
    subset.write_text("1 5 9")
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(openai_args(fake_openai, out, demo_video_dir, "--max_frames", "2", "--subset", str(subset))) == 0
    data = json.loads(out.read_text())
    assert [r["idx"] for r in data["individual_results"]] == [1, 5, 9]
    assert len(fake_openai.chat_requests()) == 3  # only those questions were sent
    assert data["stage"]["fingerprint"]["data"]["subset_sha256"] == read_subset(subset).sha256
    assert data["inference"]["dataset"]["subset"] == str(subset)
    # the range counts among the subset's questions; another subset reuses the records it shares
    fake_openai.requests.clear()
    subset.write_text("1 5 9 10")
    assert eval_video_llm.main(openai_args(fake_openai, out, demo_video_dir, "--max_frames", "2", "--subset", str(subset))) == 0
    assert [r["idx"] for r in json.loads(out.read_text())["individual_results"]] == [1, 5, 9, 10]
    assert len(fake_openai.chat_requests()) == 1


def test_a_bad_inference_subset_is_refused_before_any_request(fake_openai, demo_video_dir, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("1 two 3")
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(openai_args(fake_openai, out, demo_video_dir, "--subset", str(bad))) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "--subset" in errors[0] and "'two' is not a question idx" in errors[0]
    assert not fake_openai.chat_requests() and not out.exists()


def test_the_judge_pays_only_for_the_subset(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-subset")
    write_judge_input(tmp_path / "eval.json", make_records(10, failed=(7,)))
    subset = tmp_path / "subset.json"
    subset.write_text(json.dumps([2, 3, 7, 8]))
    with FakeOpenAIServer(good) as server:
        argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"), "--base_url", server.base_url,
                "--subset", str(subset), "--retry_backoff", "0.01"]
        assert subjective_evals.main(argv) == 0
        assert len(server.chat_requests()) == 3  # 2, 3 and 8: 7 failed at inference, the rest are outside the subset
        assert subjective_evals.main(argv) == 0  # done: nothing paid again
        assert len(server.chat_requests()) == 3
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == [2, 3, 8]
    meta = json.loads((tmp_path / "judge.json.meta.json").read_text())
    assert meta["stage"]["selection"]["subset_sha256"] == read_subset(subset).sha256
    assert meta["failed_at_inference"] == [{"idx": 7, "error": "video file missing", "error_class": "missing_video"}]


def test_the_reports_judge_table_counts_only_the_subset(tmp_path):
    run = make_eval(tmp_path / "eval_Qwen3-VL-8B-Instruct_mf32_n20.json", model="Qwen3-VL-8B-Instruct")
    judge = make_judge(tmp_path / "judge_Qwen3-VL-8B-Instruct_mf32_n20.json", n=20)
    subset = tmp_path / "ten.txt"
    subset.write_text(" ".join(str(i) for i in range(10)))
    report = build_report([str(run)], [str(judge)], subset=str(subset))
    assert report.runs[0].overall.total == 10 and report.judges[0].scored == 10  # the judge table restricted like the MCQ table
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    assert "10 entries scored" in md and "10 of its entries in the --subset counted" in md
