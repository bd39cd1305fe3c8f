"""People's answers and labels through the project's stages, end to end (issue 38's "Done when"): answers
submitted to the app (its Flask test client: the same app, without a browser) make raw files that score
through calculate, evaluate, the judge (the fake OpenAI server) and the report, which shows the human row;
a labeller's labels and the LLM labeller's (through the fake server; a rerun sends nothing) give the report
its failure-mode chart and Cohen's kappa."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import evaluate_results
import subjective_evals
from k9bench.people import FAILURE_TYPES
from tests.fake_openai_server import FakeOpenAIServer, Reply
from tests.pipeline_fakes import fake, launcher_env, listener  # noqa: F401 (fixtures)
from tests.view_fakes import demo_eval

pytestmark = pytest.mark.usefixtures("fake_embedding")
TOKEN = "test-token-0123456789"
FAST = ["--retry_backoff", "0.01", "--retry_backoff_max", "0.05", "--timeout", "5"]
TYPES = list(FAILURE_TYPES)


@pytest.fixture
def fake_embedding(monkeypatch):
    import k9bench.scoring.embedding
    from tests.fake_embedder import FakeLoader

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", FakeLoader())
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-people")


def judge_reply(req) -> Reply:
    """Accuracy 8 for ana's answers, 6 for ben's, 4 for a model's."""
    acc = 8 if "by ana" in req.text else 6 if "by ben" in req.text else 4
    return Reply(f"CoT: compared.\n{{'Logic': 7, 'Factuality': 6, 'Accuracy': {acc}, 'Conciseness': 8, 'Overall': 6}}")


def llm_label_of(question: str) -> str:
    return TYPES[len(question) % 4]


def labeller_reply(req) -> Reply:
    question = re.search(r"Question: (.*)", req.text).group(1)
    return Reply(f'The answer misses it.\n{{"label": "{llm_label_of(question)}", "reason": "looked at the wrong thing"}}')


def submit_all(session, forms) -> None:
    from k9bench.people.app import create_app

    client = create_app(session, TOKEN).test_client()
    for item, form in zip(list(session.items), forms):
        reply = client.post(f"/submit?token={TOKEN}", data={"token": TOKEN, "idx": str(item.idx), "seconds": "3.5", **form})
        assert reply.status_code == 303, reply.data
    session.book.close()


def answer(tmp: Path, who: str, n: int, video_dir: Path) -> Path:
    from k9bench.data.dataset import load_questions
    from k9bench.people.answering import open_session

    questions = [q for q in load_questions("demo").questions if q.idx < 6]
    session = open_session(who, questions, tmp, video_dir, seed=0, dataset="demo", subset=None)
    submit_all(session, [{"answer": f"an answer by {who}"}] * n)
    return session.book.export_path


def judge(eval_file: Path, server: FakeOpenAIServer) -> Path:
    out = eval_file.with_name(eval_file.name.replace("eval_", "judge_"))
    assert subjective_evals.main(["--evaluations", str(eval_file), "--output", str(out), "--base_url", server.base_url, *FAST, "-q"]) == 0
    return out


def score(raw: Path) -> Path:
    sim, ev = raw.with_name(raw.name.replace("raw_", "sim_")), raw.with_name(raw.name.replace("raw_", "eval_"))
    assert evaluate_results.main(["--mode", "calculate", "--input_file", str(raw), "--output_file", str(sim), "-q"]) == 0
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(sim), "--output_file", str(ev), "-q"]) == 0
    return ev


def test_human_answers_score_through_every_stage_and_the_report_shows_the_human_row(tmp_path, demo_video_dir):
    raws = [answer(tmp_path, "ana", 4, demo_video_dir), answer(tmp_path, "ben", 3, demo_video_dir)]
    assert [len(json.loads(p.read_text())["individual_results"]) for p in raws] == [4, 3]
    model_eval = demo_eval(tmp_path / "eval_tiny-m_mf4_n12.json", demo_video_dir, shift=1)
    with FakeOpenAIServer(judge_reply) as server:
        human_judges = [judge(score(raw), server) for raw in raws]
        model_judge = judge(model_eval, server)
    human_eval = json.loads((tmp_path / "eval_human-ana.json").read_text())
    assert human_eval["total_count"] == 4 and {r["model_name"] for r in human_eval["individual_results"]} == {"human-ana"}
    report = tmp_path / "report"
    assert evaluate_results.main(["--mode", "report", "--input_file", str(model_eval), "--judge_files", str(model_judge),
                                  *map(str, human_judges), "--report_dir", str(report), "--published", "matching", "-q"]) == 0
    md = (report / "report.md").read_text()
    section = md.split("## People vs models")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    answered = [{r["idx"] for r in json.loads(p.read_text())["individual_results"]} for p in raws]
    n = len(answered[0] & answered[1])  # the questions both answered: Table 4 compares on those
    assert n >= 1 and f"on the {n} question" in section
    assert rows[1] == f"| **people (mean of 2)** | this run (people) | 70.0 | {n} | 70.0 | 4, 3 |"
    assert rows[2:4] == [f"| &nbsp;&nbsp;human-ana | person | 80.0 | {n} | 80.0 | 4 |",
                         f"| &nbsp;&nbsp;human-ben | person | 60.0 | {n} | 60.0 | 3 |"]
    assert rows[4] == f"| tiny-m | this run (model) | 40.0 | {n} | 40.0 | 12 |"
    assert rows[5] == "| human | paper | 69.9 | 100 | — | — |"  # Table 4's human row beside ours
    people = json.loads((report / "report.json").read_text())["people"]
    assert people["human_mean_accuracy"] == 70.0


def test_people_and_llm_labels_give_the_chart_and_kappa_and_a_rerun_sends_nothing(tmp_path, demo_video_dir):
    from k9bench.people.labels import open_label_session
    from k9bench.people.labeller import main as llm_main

    model_eval = demo_eval(tmp_path / "eval_tiny-m_mf4_n12.json", demo_video_dir, shift=1)
    wrong = [r for r in json.loads(model_eval.read_text())["individual_results"] if not r["is_correct"]]
    assert len(wrong) >= 6
    session = open_label_session(model_eval, "ana", tmp_path / "labels", demo_video_dir, size=6, seed=1)
    assert len(session.items) == 6 and {r.idx for r in session.items} <= {r["idx"] for r in wrong}
    # ana agrees with the LLM on all but the last two
    forms = [{"label": llm_label_of(r.question)} for r in session.items[:4]]
    forms += [{"label": "scoring_wrong"}, {"label": "other", "note": "the <b>video</b> is a test pattern"}]
    submit_all(session, forms)
    people_file = session.book.export_path
    saved = json.loads(people_file.read_text())
    assert saved["labeller_kind"] == "person" and [r["label"] for r in saved["labels"]] != [] and len(saved["labels"]) == 6
    out = tmp_path / "labels" / "labels_llm.json"
    argv = ["--evaluations", str(model_eval), "--output", str(out), "--labeller_model", "judge-x", *FAST, "-q"]
    with FakeOpenAIServer(labeller_reply) as server:
        assert llm_main([*argv, "--base_url", server.base_url, "--concurrency", "3"]) == 0
        first = len(server.chat_requests())
        assert first == len(wrong)  # every wrong answer once
        assert llm_main([*argv, "--base_url", server.base_url]) == 0
        out.unlink()  # even without the earlier file, the reply store answers
        assert llm_main([*argv, "--base_url", server.base_url]) == 0
        assert len(server.chat_requests()) == first  # nothing sent twice
        assert "Pick the one failure type" in server.chat_requests()[0].text
    llm = json.loads(out.read_text())
    assert llm["labeller_kind"] == "llm" and len(llm["labels"]) == len(wrong) and llm["run"]["from_store"] == len(wrong)
    report = tmp_path / "report"
    assert evaluate_results.main(["--mode", "report", "--input_file", str(model_eval), "--failure_labels", str(people_file), str(out),
                                  "--report_dir", str(report), "-q"]) == 0
    md = (report / "report.md").read_text()
    section = md.split("## Why the models are wrong")[1]
    assert section.index("Cohen's kappa") < section.index("| Failure type |")  # agreement before the shares
    assert "**person ana vs llm llm-judge-x**: 6 answers labelled by both, same label on 67%" in section
    people = json.loads((report / "report.json").read_text())["people"]
    pair = people["failure_labels"][0]["agreements"][0]
    from sklearn.metrics import cohen_kappa_score

    labels = {r["idx"]: r["label"] for r in saved["labels"]}
    mine = {r["idx"]: r["label"] for r in llm["labels"]}
    common = sorted(labels)
    assert pair["kappa"] == pytest.approx(cohen_kappa_score([labels[i] for i in common], [mine[i] for i in common]))
    assert pair["interval95"][0] <= pair["kappa"] <= pair["interval95"][1]
    assert "people (n=6)" in section and f"LLM llm-judge-x (n={len(wrong)})" in section
    assert (report / "failure_modes_tiny-m.png").stat().st_size > 5000


def test_the_launcher_plans_the_llm_labeller_after_the_judge_only_when_asked(fake, launcher_env, listener, capsys, tmp_path,
                                                                           monkeypatch):
    from tests.test_pipeline import launch

    def plan(out: str) -> list[str]:
        return [ln.split()[2] for ln in out.splitlines() if len(ln.split()) > 3 and ln.split()[3] in ("run", "skip")]

    launcher_env(JUDGE_BASE_URL=listener)
    code, out, _ = launch(fake, capsys, "--dry_run")
    assert code == 0 and "llm-label" not in plan(out)  # off unless asked
    launcher_env(JUDGE_BASE_URL=listener, LABEL="1", JUDGE_MODEL="judge-x")
    code, out, ran = launch(fake, capsys, "--dry_run")
    assert code == 0 and ran == []
    assert plan(out)[-3:] == ["judge", "llm-label", "report"], out
    labels = tmp_path / "out" / "labels_llm_tiny-m_mf4_n-1.json"
    assert any(ln.split()[2:4] == ["llm-label", "run"] and ln.endswith(f"-> {labels}") for ln in out.splitlines()), out
    launcher_env(JUDGE_BASE_URL="", LABEL="1")  # asked for, but no endpoint: refused before any stage
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, out, ran = launch(fake, capsys)
    assert code == 2 and ran == [] and "LABEL=1: the LLM labeller uses the judge's endpoint" in out, out


def test_the_llm_labeller_keeps_what_it_got_and_a_rerun_sends_only_the_unlabelled(tmp_path, demo_video_dir):
    """A reply without a label and a call that fails after its retries leave those answers unlabelled (exit
    1, listed with the reason); the labelled ones stay, and the rerun sends only the others."""
    from k9bench.people.labeller import main as llm_main
    from tests.fake_openai_server import Fault

    model_eval = demo_eval(tmp_path / "eval_tiny-m_mf4_n12.json", demo_video_dir, shift=1)
    wrong = [r for r in json.loads(model_eval.read_text())["individual_results"] if not r["is_correct"]]
    broken = {wrong[0]["question"]: "no label here", wrong[1]["question"]: Fault(status=500)}

    def flaky(req):
        question = re.search(r"Question: (.*)", req.text).group(1)
        return broken.get(question) or labeller_reply(req)

    out = tmp_path / "labels.json"
    argv = ["--evaluations", str(model_eval), "--output", str(out), "--max_retries", "1", *FAST, "-q"]
    with FakeOpenAIServer(flaky) as server:
        assert llm_main([*argv, "--base_url", server.base_url]) == 1
        first = json.loads(out.read_text())
        assert len(first["labels"]) == len(wrong) - 2 and sorted(s["idx"] for s in first["skipped"]) == sorted(r["idx"] for r in wrong[:2])
        assert any("no JSON object" in s["error"] for s in first["skipped"]) and any("call failed" in s["error"] for s in first["skipped"])
        sent = len(server.chat_requests())
        broken.clear()
        assert llm_main([*argv, "--base_url", server.base_url]) == 0
        again = [re.search(r"Question: (.*)", r.text).group(1) for r in server.chat_requests()[sent:]]
    assert sorted(again) == sorted(r["question"] for r in wrong[:2])  # only the two left unlabelled
    final = json.loads(out.read_text())
    assert len(final["labels"]) == len(wrong) and final["skipped"] == []
