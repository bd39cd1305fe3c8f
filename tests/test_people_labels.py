"""Units of the people package: kappa and its interval's coverage (a seeded simulation), the stratified
sample, the seeded order, the labels file reader, the LLM labeller's reply parser, the durable book."""

from __future__ import annotations

import json

import numpy as np
import pytest

from k9bench.artifact_io import ArtifactError
from k9bench.artifacts import QuestionRecord
from k9bench.people import LABELS
from k9bench.people.agreement import agreement, cohen_kappa, kappa_interval
from k9bench.people.answering import seeded_order
from k9bench.people.labelling_run import parse_label
from k9bench.people.labels import read_labels_file, stratified_sample, wrong_answers
from k9bench.people.storage import Book


def test_kappa_is_sklearns_and_undefined_for_one_label():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(5)
    for _ in range(20):
        a = list(rng.choice(list("abcd"), 40))
        b = [x if rng.random() < 0.6 else str(rng.choice(list("abcd"))) for x in a]
        assert cohen_kappa(a, b) == pytest.approx(cohen_kappa_score(a, b))
    assert cohen_kappa(["a"] * 5, ["a"] * 5) is None
    assert cohen_kappa(list("abab"), list("abab")) == 1.0


def test_the_kappa_interval_covers_the_true_kappa_about_95_percent_of_the_time():
    """Two labellers drawn from a known joint distribution over 4 labels; the population kappa is known;
    the 95% bootstrap interval of 300 seeded samples of 120 answers must cover it 90-99% of the time."""
    joint = np.array([[.30, .04, .02, .01], [.03, .20, .03, .02], [.02, .03, .15, .02], [.01, .02, .02, .08]])
    joint /= joint.sum()
    po, pe = np.trace(joint), float(joint.sum(1) @ joint.sum(0))
    true = (po - pe) / (1 - pe)
    rng = np.random.default_rng(2024)
    cells = rng.choice(16, size=(300, 120), p=joint.ravel())
    covered = 0
    for i, sample in enumerate(cells):
        a, b = list(sample // 4), list(sample % 4)
        interval, undefined = kappa_interval(a, b, samples=400, seed=i)
        assert undefined == 0
        covered += interval[0] <= true <= interval[1]
    assert 0.90 <= covered / 300 <= 0.99, covered


def test_agreement_counts_the_confusion_table_on_the_common_answers_only():
    found = agreement("p", {1: "a", 2: "b", 3: "a", 9: "b"}, "q", {1: "a", 2: "a", 3: "a", 7: "b"})
    assert found.count == 3 and found.confusion == {"a": {"a": 2}, "b": {"a": 1}} and found.observed == pytest.approx(2 / 3)
    assert agreement("p", {1: "a"}, "q", {2: "a"}) is None


def rec(idx: int, cat: str, correct: bool | None = False, failed: bool = False) -> QuestionRecord:
    return QuestionRecord(idx=idx, question_category=cat, is_correct=correct, error="x" if failed else None)


def test_the_sample_is_stratified_seeded_and_leaves_out_failed_and_right_answers():
    records = [rec(i, "posture analysis") for i in range(60)] + [rec(100 + i, "context analysis") for i in range(30)]
    records += [rec(200 + i, "action sequence") for i in range(10)]
    records += [rec(300, "posture analysis", failed=True), rec(301, "posture analysis", correct=True)]
    wrong = wrong_answers(records)
    assert len(wrong) == 100
    chosen = stratified_sample(wrong, 20, seed=3)
    cats = [r.question_category for r in chosen]
    assert (cats.count("posture analysis"), cats.count("context analysis"), cats.count("action sequence")) == (12, 6, 2)
    assert [r.idx for r in chosen] == [r.idx for r in stratified_sample(wrong, 20, seed=3)]
    assert {r.idx for r in chosen} != {r.idx for r in stratified_sample(wrong, 20, seed=4)}
    assert len(stratified_sample(wrong, 7, seed=0)) == 7 and len(stratified_sample(wrong, None, seed=0)) == 100


def test_the_order_is_seeded_by_the_annotator():
    idx = list(range(50))
    assert seeded_order(idx, "ana", 0) == seeded_order(idx, "ana", 0) != seeded_order(idx, "ben", 0)
    assert seeded_order(idx, "ana", 0) != seeded_order(idx, "ana", 1) and sorted(seeded_order(idx, "ana", 0)) == idx


def test_a_bad_labels_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "l.json"
    head = {"kind": "failure_labels", "schema_version": 1, "stage": "people-label"}
    for content, says in (({"labels": []}, "not a failure-labels file"),
                          ({"header": {**head, "kind": "judge"}, "labels": []}, "kind 'judge'"),
                          ({"header": {**head, "schema_version": 9}, "labels": []}, "schema_version 9"),
                          ({"header": head, "labeller_kind": "person", "labels": [{"idx": 1, "label": "bad"}]}, r"labels\[0\]"),
                          ({"header": head, "labeller_kind": "robot", "labels": []}, "labeller_kind")):
        path.write_text(json.dumps(content))
        with pytest.raises(ArtifactError, match=says) as exc:
            read_labels_file(path)
        assert str(path) in str(exc.value)
    path.write_text(json.dumps({"header": head, "labeller": "ana", "labeller_kind": "person", "model_name": "m",
                                "labels": [{"idx": 3, "label": "cue_misread"}]}))
    assert read_labels_file(path).labels == {3: "cue_misread"}


def test_the_llm_reply_parser_takes_the_last_known_label():
    assert parse_label('first {"label": "other"} then {"label": "sequence_error", "reason": "r"}') == ("sequence_error", "r")
    assert parse_label('{"label": "cue_misread"} and {"label": "nonsense"}')[0] == "cue_misread"
    for bad in ("", "no json", '{"label": "nonsense"}', "{broken"):
        with pytest.raises(ValueError):
            parse_label(bad)
    assert set(LABELS) >= {"cue_misread", "sequence_error", "causal_misattribution", "overgeneralisation", "scoring_wrong", "other"}


def test_the_book_keeps_each_record_once_and_survives_a_torn_line(tmp_path):
    out = tmp_path / "raw.json"
    book = Book(out, lambda rows: {"individual_results": rows})
    assert book.add({"idx": 3, "v": 1}) and not book.add({"idx": 3, "v": 2})
    assert book.add({"idx": 1, "v": 1})
    book.close()
    assert [r["idx"] for r in json.loads(out.read_text())["individual_results"]] == [1, 3]
    with open(book.checkpoint, "a") as fh:
        fh.write('{"idx": 7, "v"')  # a kill in the middle of a line
    again = Book(out, lambda rows: {"individual_results": rows})
    assert sorted(again.records) == [1, 3] and again.records[3]["v"] == 1
    again.close()
