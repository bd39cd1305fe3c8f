"""The fine rule, record checks, evaluation statistics and bootstrap intervals (no model needed)."""

import math
import re

import pytest

from k9bench.artifacts import QuestionRecord, RecordsArtifact
from k9bench.scoring import (
    FLAG_BLANK,
    FLAG_EMPTY,
    SKIP_FAILED,
    ScoringError,
    default_output_path,
    evaluate,
    fine_verdict,
    format_table,
    is_correct_fine,
    option_letters,
    plan_calculation,
)
from k9bench.stats import bootstrap_accuracy

OPTS = ["A. sits", "B. runs", "C. sleeps", "D. barks", "E. eats"]


def sims(a, b, c, d, e):
    return {"A": a, "B": b, "C": c, "D": d, "E": e}


# (similarities, ground truth, threshold, expected verdict, words the explanation must hold)
FINE_CASES = [
    pytest.param(sims(0.9, 0.1, 0.2, 0.3, 0.4), "A", 0.5, True, "highest", id="clear-win"),
    pytest.param(sims(0.9, 0.1, 0.2, 0.3, 0.4), "B", 0.5, False, "A is more similar", id="wrong-letter-is-best"),
    pytest.param(sims(0.45, 0.1, 0.2, 0.3, 0.4), "A", 0.5, False, "not above", id="best-but-below-threshold"),
    pytest.param(sims(0.5, 0.1, 0.2, 0.3, 0.4), "A", 0.5, False, "not above", id="exactly-at-threshold-is-wrong"),
    pytest.param(sims(0.5000001, 0.1, 0.2, 0.3, 0.4), "A", 0.5, True, "highest", id="just-above-threshold"),
    pytest.param(sims(0.7, 0.7, 0.2, 0.3, 0.4), "A", 0.5, True, "tie", id="tie-with-distractor-counts-correct"),
    pytest.param(sims(0.7, 0.7, 0.7, 0.7, 0.7), "E", 0.5, True, "tie", id="five-way-tie-correct"),
    pytest.param(sims(0.4, 0.4, 0.2, 0.3, 0.1), "B", 0.5, False, "not above", id="tie-below-threshold-wrong"),
    pytest.param(sims(0.7, 0.7000001, 0.2, 0.3, 0.4), "A", 0.5, False, "B is more similar", id="distractor-strictly-greater"),
    pytest.param(sims(0.3, 0.1, 0.2, 0.45, 0.0), "A", 0.5, False, "D is more similar", id="below-and-beaten"),
    pytest.param(sims(0.2, 0.1, 0.0, -0.1, 0.15), "A", None, True, "highest", id="argmax-only-ignores-threshold"),
    pytest.param(sims(0.2, 0.1, 0.0, -0.1, 0.25), "A", None, False, "E is more similar", id="argmax-only-beaten"),
    pytest.param(sims(-0.2, -0.5, -0.3, -0.4, -0.6), "A", -0.25, True, "highest", id="negative-threshold"),
    pytest.param(sims(0.6, 0.1, 0.2, 0.3, 0.4), "A", 0.6, False, "not above", id="threshold-equal-0.6"),
]


@pytest.mark.parametrize("table, gt, threshold, expected, words", FINE_CASES)
def test_fine_rule(table, gt, threshold, expected, words):
    verdict = fine_verdict(table, gt, threshold)
    assert verdict.is_correct is expected
    assert is_correct_fine(table, gt, threshold) is expected
    assert words in verdict.explanation
    assert verdict.explanation.startswith("correct" if expected else "wrong")


def test_margin_and_best_option():
    v = fine_verdict(sims(0.6, 0.8, 0.2, 0.3, 0.1), "A", 0.5)
    assert v.best_option == "B" and v.margin == pytest.approx(-0.2)
    v = fine_verdict(sims(0.8, 0.8, 0.2, 0.3, 0.1), "B", 0.5)
    assert v.best_option == "B" and v.margin == 0.0  # a tie names the ground truth as best
    v = fine_verdict(sims(0.9, 0.5, 0.2, 0.3, 0.1), "A", 0.5)
    assert v.best_option == "A" and v.margin == pytest.approx(0.4)


@pytest.mark.parametrize(
    "options, letters",
    [
        (OPTS, list("ABCDE")),
        (["A. x", "B. y", "C. z"], list("ABC")),
        ({"B": "y", "A": "x", "C": "z", "D": "w", "E": "v"}, list("ABCDE")),
        (["no prefix here", "another"], ["A", "B"]),
    ],
)
def test_option_letters(options, letters):
    texts, got = option_letters(options, "f.json: record idx 1")
    assert got == letters
    assert len(texts) == len(letters)
    if isinstance(options, dict):
        assert texts[0] == "A. x"


@pytest.mark.parametrize(
    "options, message",
    [
        (["A. a", "C. c"], "labelled 'C'"),
        (OPTS + ["F. extra"], "at most 5"),
        (["A. a", ""], "option B is empty"),
        ([], "missing"),
        ("A. a", "missing"),
        ({"A": "x", "C": "z"}, "keys are"),
    ],
)
def test_option_letters_rejects(options, message):
    with pytest.raises(ScoringError, match=message) as err:
        option_letters(options, "f.json: record idx 7")
    assert "f.json: record idx 7" in str(err.value)


def rec(idx, gt="A", answer="a dog", sims_=None, cat="posture analysis", scene="vidAAAAAAAA", **kw):
    return QuestionRecord(idx=idx, question_category=cat, video=f"{scene}.mp4", ground_truth=gt, response=answer,
                          answer=answer, scene_name=scene, question="q", options=list(OPTS),
                          cosine_similarities=sims_, **kw)


def test_plan_calculation_embeds_blank_answers_and_sets_failed_aside():
    records = [rec(1), rec(2, answer="  "), QuestionRecord(idx=3, ground_truth="A", error="Video not found"), rec(4, answer="")]
    rows = [r.to_dict() for r in records]
    items, skipped = plan_calculation(records, "raw.json", rows)
    assert [i.idx for i in items] == [1, 2, 4]  # every answer string, blank and empty included
    assert skipped == {2: SKIP_FAILED}
    assert items[0].letters == list("ABCDE") and items[0].options == OPTS


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r.pop("answer"), "no 'answer'"),
        (lambda r: r.update(options=None), "'options' is missing"),
        (lambda r: r.update(ground_truth=""), "'ground_truth' is missing"),
        (lambda r: r.update(ground_truth="F"), "ground truth 'F' is not one of the options"),
        (lambda r: r.update(ground_truth="a"), "ground truth 'a' is not one of the options"),
    ],
)
def test_plan_calculation_rejects_bad_records(mutate, message):
    rows = [rec(1).to_dict(), rec(42).to_dict()]
    mutate(rows[1])
    records = [QuestionRecord.from_dict(r) for r in rows]
    with pytest.raises(ScoringError, match=message) as err:
        plan_calculation(records, "raw.json", rows)
    assert "raw.json: record idx 42" in str(err.value)


def small_eval_set():
    """Two categories over three videos, with a failed sample and an empty answer."""
    return RecordsArtifact(records=[
        rec(1, "A", sims_=sims(0.9, 0.1, 0.1, 0.1, 0.1), scene="v1aaaaaaaaa"),               # correct
        rec(2, "B", sims_=sims(0.9, 0.6, 0.1, 0.1, 0.1), scene="v1aaaaaaaaa"),               # wrong: A beats B
        rec(3, "C", sims_=sims(0.1, 0.1, 0.45, 0.1, 0.1), scene="v2aaaaaaaaa", cat="action sequence"),  # wrong at 0.5, right at 0.4
        rec(4, "D", sims_=sims(0.1, 0.1, 0.1, 0.65, 0.65), scene="v2aaaaaaaaa", cat="action sequence"),  # tie: correct
        QuestionRecord(idx=5, question_category="action sequence", video="v3aaaaaaaaa.mp4", scene_name="v3aaaaaaaaa",
                       ground_truth="A", error="CUDA out of memory", error_class="oom"),
        rec(6, "A", answer="", sims_=sims(0.05, 0.12, 0.1, 0.08, 0.02), scene="v3aaaaaaaaa"),  # empty: wrong by the rule
    ], meta={"total_count": 6, "similarity_model": "m", "similarity_calculated_at": "t"})


def test_evaluate_verdicts_and_reference_keys():
    out = evaluate(small_eval_set(), threshold=0.5, resamples=200, seed=1)
    verdicts = {r.idx: r.is_correct for r in out.records}
    assert verdicts == {1: True, 2: False, 3: False, 4: True, 5: False, 6: False}
    assert all(r.eval_mode == "fine" and r.evaluation_explanation for r in out.records)
    d = out.to_dict()
    assert list(d)[:9] == ["evaluation_timestamp", "eval_mode", "threshold", "accuracy", "correct_count", "total_count",
                           "category_wise_accuracy", "individual_results", "metadata"]
    assert d["accuracy"] == pytest.approx(2 / 6) and d["correct_count"] == 2 and d["total_count"] == 6
    assert d["category_wise_accuracy"] == {
        "posture analysis": {"accuracy": pytest.approx(1 / 3), "correct": 1, "total": 3},
        "action sequence": {"accuracy": pytest.approx(1 / 3), "correct": 1, "total": 3},
    }
    assert d["metadata"] == {"similarity_model": "m", "similarity_calculated_at": "t"}
    rec2 = d["individual_results"][1]
    assert rec2["similarity_margin"] == pytest.approx(-0.3) and rec2["best_option"] == "A"
    assert d["individual_results"][4]["failure_reason"] == "oom"
    assert "failed sample (oom)" in d["individual_results"][4]["evaluation_explanation"]


def test_evaluate_statistics_all_valid_and_sensitivity():
    stats = evaluate(small_eval_set(), threshold=0.5, resamples=200, seed=1).meta["statistics"]
    assert stats["overall"]["all"]["total"] == 6 and stats["overall"]["valid"]["total"] == 5
    assert stats["overall"]["valid"]["accuracy"] == pytest.approx(2 / 5)
    valid = stats["categories"]["action sequence"]["valid"]
    assert valid == {"accuracy": pytest.approx(0.5), "correct": 1, "total": 2, "videos": 1, "ci95": valid["ci95"]}
    assert stats["categories"]["action sequence"]["all"]["videos"] == 2 and stats["overall"]["all"]["videos"] == 3
    assert stats["failed_samples"] == {"count": 1, "reasons": {"oom": 1}}
    assert stats["empty_answers"] == 1 and stats["answer_flags"] == {FLAG_EMPTY: {"count": 1, "correct": 0}}
    sens = stats["threshold_sensitivity"]
    assert list(sens) == ["0.3", "0.4", "0.5", "0.6", "0.7", "argmax"]
    assert sens["0.4"]["correct"] == 3 and sens["0.5"]["correct"] == 2
    assert sens["0.7"]["correct"] == 1  # only idx 1 (0.9) clears 0.7
    assert sens["argmax"]["correct"] == 3
    assert sens["0.5"]["accuracy_all"] == pytest.approx(2 / 6)
    low, high = stats["overall"]["all"]["ci95"]
    assert low <= 2 / 6 <= high
    assert stats["bootstrap"]["videos"] == 3 and stats["bootstrap"]["unit"] == "video"


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(cosine_similarities=sims(float("nan"), 0.1, 0.1, 0.1, 0.1)), "option A is nan"),
        (dict(cosine_similarities={"A": 0.1, "B": "high", "C": 0.1, "D": 0.1, "E": 0.1}), "option B is 'high'"),
        (dict(cosine_similarities=None), "no 'cosine_similarities'"),
        (dict(cosine_similarities={"A": 0.9, "B": 0.1}), "similarities cover A, B"),
        (dict(ground_truth="F"), "ground truth 'F' is not one of the options"),
        (dict(ground_truth=""), "'ground_truth' is missing"),
        (dict(ground_truth=2), "'ground_truth' is not an option letter: 2"),
    ],
)
def test_evaluate_rejects_bad_records(bad, message):
    art = small_eval_set()
    for key, value in bad.items():
        setattr(art.records[2], key, value)
    with pytest.raises(ScoringError, match=message) as err:
        evaluate(art, path="sim.json", resamples=0)
    assert "sim.json: record idx 3" in str(err.value)


def test_empty_and_blank_answers_are_decided_by_the_rule_flagged_and_counted():
    """The reference's default (issue 24): an empty or blank answer is embedded and decided by its
    similarities like any other; we flag and count it, never override it."""
    art = RecordsArtifact(records=[
        rec(1, "A", answer="   ", sims_=sims(0.31, 0.1, 0.1, 0.1, 0.1)),  # blank, yet above 0.3 and best: correct at 0.3
        rec(2, "B", answer="", sims_=sims(0.1, 0.2, 0.1, 0.1, 0.1)),      # empty: best but below 0.3
        rec(3, "C", answer="a dog", sims_=sims(0.1, 0.1, 0.9, 0.1, 0.1)),
    ], meta={"similarity_model": "m"})
    out = evaluate(art, threshold=0.3, resamples=0)
    got = {r.idx: r for r in out.records}
    assert got[1].is_correct is True and got[1].extra["answer_flag"] == FLAG_BLANK
    assert got[2].is_correct is False and got[2].extra["answer_flag"] == FLAG_EMPTY
    assert "answer_flag" not in got[3].extra and "failure_reason" not in got[1].extra
    assert "blank; decided by its similarities" in got[1].evaluation_explanation
    stats = out.meta["statistics"]
    assert stats["empty_answers"] == 2 and stats["answer_flags"] == {FLAG_BLANK: {"count": 1, "correct": 1},
                                                                     FLAG_EMPTY: {"count": 1, "correct": 0}}
    assert out.meta["correct_count"] == 2 and stats["overall"]["valid"]["total"] == 3


def test_evaluate_rejects_non_finite_threshold():
    with pytest.raises(ScoringError, match="threshold"):
        evaluate(small_eval_set(), threshold=math.nan, resamples=0)


def test_format_table_shows_every_figure():
    meta = evaluate(small_eval_set(), threshold=0.5, resamples=100, seed=0).meta
    text = format_table(meta, title="eval_x.json")
    assert text.splitlines()[0] == "eval_x.json"
    assert "posture analysis" in text and "action sequence" in text and "overall" in text
    assert "33.3%" in text  # ALL overall
    assert "40.0%" in text  # VALID overall
    assert "failed samples: 1 (oom 1); empty or blank answers: 1 (decided by their similarities, 0 correct)" in text
    assert "argmax 50.0%" in text
    assert "95% CI: percentile bootstrap over 3 videos, 100 resamples, seed 0" in text


def test_format_table_shows_na_for_an_interval_over_fewer_than_ten_videos():
    """As the report does (k9bench.stats.interval_shown): an interval over fewer than 10 videos is printed
    as [n/a] with a note, never as a number such as [0.0, 0.0]; one over 10 or more videos is printed."""
    thin = format_table(evaluate(small_eval_set(), threshold=0.5, resamples=100, seed=0).meta)
    rows = [ln for ln in thin.splitlines() if ln.startswith(("posture analysis", "action sequence", "overall"))]
    assert len(rows) == 3 and all(ln.count("[n/a]") == 2 for ln in rows), thin
    assert "[0.0, 0.0]" not in thin and "an interval over fewer than 10 videos is not shown" in thin
    # 12 videos of posture analysis (one question each, half right), 2 of action sequence (both wrong)
    records = [rec(i, "A" if i % 2 else "B", sims_=sims(0.9, 0.1, 0.1, 0.1, 0.1), scene=f"v{i:02d}aaaaaaaa") for i in range(12)]
    records += [rec(20 + i, "B", sims_=sims(0.9, 0.1, 0.1, 0.1, 0.1), scene=f"w{i:02d}aaaaaaaa", cat="action sequence") for i in range(2)]
    text = format_table(evaluate(RecordsArtifact(records=records, meta={"similarity_model": "m"}), threshold=0.5, resamples=200,
                                 seed=0).meta)
    lines = {ln.split("  ")[0]: ln for ln in text.splitlines() if ln.startswith(("posture analysis", "action sequence", "overall"))}
    assert "[n/a]" not in lines["posture analysis"] and "[n/a]" not in lines["overall"]
    assert re.search(r"\[\s*\d+\.\d, \s*\d+\.\d\]", lines["overall"])
    assert lines["action sequence"].count("[n/a]") == 2 and "[0.0, 0.0]" not in lines["action sequence"]


def test_bootstrap_reproducible_and_contains_point_estimate():
    import random

    rnd = random.Random(5)
    units = [f"v{i // 5}" for i in range(300)]
    correct = [rnd.random() < 0.35 for _ in units]
    labels = [("cat1", "cat2", "cat3")[i % 3] for i in range(300)]
    a = bootstrap_accuracy(correct, units, labels, resamples=500, seed=7)
    b = bootstrap_accuracy(correct, units, labels, resamples=500, seed=7)
    c = bootstrap_accuracy(correct, units, labels, resamples=500, seed=8)
    assert a == b
    assert a.overall != c.overall
    point = sum(correct) / len(correct)
    assert a.overall.low < point < a.overall.high
    assert a.units == 60 and a.overall.defined == 500
    for name in ("cat1", "cat2", "cat3"):
        sub = [ok for ok, lab in zip(correct, labels) if lab == name]
        iv = a.by_label[name]
        assert iv.low <= sum(sub) / len(sub) <= iv.high


def test_bootstrap_moves_questions_of_a_video_together():
    # Two videos of three questions each: one all right, one all wrong. Resampling videos can
    # only give accuracies 0, 1/2 or 1; resampling questions would give sixths too.
    units = ["good"] * 3 + ["bad"] * 3
    correct = [True] * 3 + [False] * 3
    res = bootstrap_accuracy(correct, units, resamples=400, seed=0, level=0.5)
    assert {res.overall.low, res.overall.high} <= {0.0, 0.5, 1.0}


def test_bootstrap_counted_mask_and_degenerate_cases():
    res = bootstrap_accuracy([True, False, True], ["a", "b", "c"], ["x", "x", "y"], counted=[True, False, True],
                             resamples=300, seed=0)
    assert res.overall.low == res.overall.high == 1.0  # the only counted questions are right
    empty = bootstrap_accuracy([], [], resamples=10)
    assert empty.overall.as_list() is None and empty.units == 0
    with pytest.raises(ValueError):
        bootstrap_accuracy([True], ["a", "b"])


@pytest.mark.parametrize(
    "name, stage, expected",
    [
        ("raw_Qwen3-VL-4B-Instruct_mf32_n10.json", "sim", "sim_Qwen3-VL-4B-Instruct_mf32_n10.json"),
        ("sim_Qwen3-VL-4B-Instruct_mf32_n10.json", "eval", "eval_Qwen3-VL-4B-Instruct_mf32_n10.json"),
        ("raw_m.json", "eval", "eval_m.json"),
        ("results.json", "sim", "results_sim.json"),
    ],
)
def test_default_output_path(tmp_path, name, stage, expected):
    assert default_output_path(tmp_path / name, stage) == tmp_path / expected


def test_bootstrap_in_chunks_equals_one_draw_and_is_bounded():
    import numpy as np

    import k9bench.stats as stats

    correct = [i % 3 == 0 for i in range(40)]
    units = [f"v{i // 4}" for i in range(40)]
    res = bootstrap_accuracy(correct, units, resamples=stats._CHUNK + 123, seed=9)
    # the same replicates drawn at once, the old way
    hits = np.bincount([i // 4 for i in range(40)], weights=np.asarray(correct, dtype=float), minlength=10)
    draws = np.random.default_rng(9).multinomial(10, np.full(10, 0.1), size=stats._CHUNK + 123).astype(float)
    acc = (draws @ hits) / (draws @ np.full(10, 4.0))
    low, high = np.percentile(acc, [2.5, 97.5])
    assert res.overall.as_list() == [float(low), float(high)]
    with pytest.raises(ValueError, match="at most"):
        bootstrap_accuracy(correct, units, resamples=stats.MAX_RESAMPLES + 1)


def test_evaluate_takes_the_settings_object():
    from k9bench.scoring.settings import EvalSettings

    art = RecordsArtifact(records=[rec(1, "A", sims_=sims(0.45, 0.1, 0.2, 0.3, 0.4)), rec(2, "B", sims_=sims(0.1, 0.9, 0.2, 0.3, 0.4))])
    out = evaluate(art, EvalSettings(threshold=0.4, bootstrap_resamples=0, sensitivity_thresholds=(0.2,)))
    assert out.meta["threshold"] == 0.4 and out.meta["correct_count"] == 2
    assert list(out.meta["statistics"]["threshold_sensitivity"]) == ["0.2", "0.4", "argmax"]
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        EvalSettings(threshold=1.5)


def test_format_table_says_one_video_in_the_singular():
    art = RecordsArtifact(records=[rec(1, "A", sims_=sims(0.9, 0.1, 0.1, 0.1, 0.1), scene="v1aaaaaaaaa"),
                                   rec(2, "B", sims_=sims(0.9, 0.6, 0.1, 0.1, 0.1), scene="v1aaaaaaaaa")],
                          meta={"total_count": 2, "similarity_model": "m", "similarity_calculated_at": "t"})
    text = format_table(evaluate(art, threshold=0.5, resamples=50, seed=0).meta, title="eval_x.json")
    assert "95% CI: percentile bootstrap over 1 video, 50 resamples" in text


# ---------------------------------------------------------------- a failed record as the reference's evaluate reads it (issue 31 item 2)


def reference_evaluate_step(sim: dict, threshold: float = 0.5) -> dict:
    """What the reference's evaluate step does with every record, as SPEC section 9 says (written
    independently): ``ord(ground_truth.upper()) - ord('A')`` picks the ground truth's position among the
    similarities (a position outside them is wrong), ``question_category`` is read for the per-category
    counts. A ground truth of "" raises TypeError (ord() of a string of length 0), a missing key KeyError."""
    verdicts, by_cat = {}, {}
    for rec in sim["individual_results"]:
        position = ord(rec["ground_truth"].upper()) - ord("A")
        values = list(rec["cosine_similarities"].values())
        ok = 0 <= position < len(values) and values[position] > threshold and not any(
            v > values[position] for i, v in enumerate(values) if i != position)
        verdicts[rec.get("idx", rec.get("example_id"))] = ok
        by_cat.setdefault(rec["question_category"], []).append(ok)
    return {"verdicts": verdicts, "categories": by_cat}


def test_a_sim_file_made_from_the_reference_failed_record_reads_in_its_evaluate_step(tmp_path, monkeypatch):
    import json

    import evaluate_results
    import k9bench.scoring.embedding
    from tests.fake_embedder import FakeLoader

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", FakeLoader())
    base = {"question_category": "posture analysis", "question": "What does the dog do?", "options": OPTS, "model_name": "M",
            "max_frames": 8}
    recs = [{**base, "idx": 0, "video": "v0.mp4", "scene_name": "v0", "ground_truth": "A", "answer": "sits", "response": "sits"},
            {"example_id": 1, "error": "Video not found: v1.mp4"},  # the reference's own failed record (SPEC section 9)
            {**base, "idx": 2, "video": "v2.mp4", "scene_name": "v2", "ground_truth": "c", "answer": "", "response": "",
             "error": "CUDA out of memory", "error_class": "oom"},  # ours, with its (lower-case) letter
            {**base, "idx": 3, "video": "v3.mp4", "scene_name": "v3", "ground_truth": "", "answer": "", "response": "",
             "error": "decode failed", "error_class": "decode_error"}]  # ours, with no letter
    raw = tmp_path / "raw_M_mf8_n4.json"
    raw.write_text(json.dumps({"individual_results": recs}))
    sim_path = tmp_path / "sim_M_mf8_n4.json"
    assert evaluate_results.main(["--mode", "calculate", "--input_file", str(raw), "--output_file", str(sim_path), "-q"]) == 0
    sim = json.loads(sim_path.read_text())
    ref = reference_evaluate_step(sim)  # no TypeError, no KeyError
    assert ref["verdicts"] == {0: ref["verdicts"][0], 1: False, 2: False, 3: False}
    failed = {r["idx"]: r for r in sim["individual_results"] if "error" in r}
    # one character each: the record's own letter where it has one, else the placeholder outside A-E
    assert {i: r["ground_truth"] for i, r in failed.items()} == {1: "Z", 2: "C", 3: "Z"}
    assert failed[1]["question_category"] == "" and failed[2]["question_category"] == "posture analysis"
    assert all(r["cosine_similarities"] == dict.fromkeys("ABCDE", 0.0) for r in failed.values())
    # and ours reads it back: the failed records stay failed samples, wrong
    ev_path = tmp_path / "eval_M_mf8_n4.json"
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(sim_path), "--output_file", str(ev_path),
                                  "--bootstrap_resamples", "0", "-q"]) == 0
    ev = json.loads(ev_path.read_text())
    assert [r["is_correct"] for r in ev["individual_results"]][1:] == [False, False, False]
    assert ev["statistics"]["failed_samples"]["count"] == 3
