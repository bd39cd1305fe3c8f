"""Both tools read each other's files (issue 14): reference-layout fixtures written by us from SPEC
sections 2, 4 and 9 (no K9-Bench data), and a minimal independent implementation of the
reference's evaluate loop that reads our sim files."""

import json

import pytest

import evaluate_results
from k9bench.artifacts import QuestionRecord, load_records_artifact
from k9bench.scoring.embedding import bundled_small_model_path, scoring_dtype

CATS = ["posture analysis", "action sequence", "context analysis", "cause-effect analysis", "interaction analysis"]
OPTS = ["A. the dog sits", "B. the dog runs", "C. the dog sleeps", "D. the dog barks at a cat", "E. the dog eats"]


def raw_record(idx, answer, gt, cat=CATS[0], scene=None):
    scene = scene or f"vid{idx:08d}"
    return {"idx": idx, "question_category": cat, "video": f"{scene}.mp4", "ground_truth": gt, "response": answer,
            "answer": answer, "scene_name": scene, "question": "What does the dog do?", "options": list(OPTS),
            "prompt": "<prompt>", "model_name": "FakeVLM", "max_frames": 32, "timestamp": "2026-01-01T00:00:00"}


def write(path, records, **top):
    path.write_text(json.dumps({"individual_results": records, "total_count": len(records), **top}))
    return path


def small_model_args():
    return ["--embedding_model", str(bundled_small_model_path()), "--device", "cpu", "--batch_size", "4", "-q"]


def reference_evaluate(sim: dict, threshold: float = 0.5) -> dict:
    """The reference's evaluate loop as SPEC sections 2, 4 and 9 describe it, written independently of
    k9bench: each record's ``cosine_similarities`` is read directly (a record without them raises
    KeyError, as the reference does), the ground-truth letter is upper-cased, and the record is correct
    when its similarity is above the threshold and no other option is strictly more similar."""
    correct = 0
    verdicts = {}
    by_cat = {}
    for rec in sim["individual_results"]:
        sims = rec["cosine_similarities"]
        gt = rec["ground_truth"].upper()
        if gt in sims:
            gt_sim = sims[gt]
            ok = gt_sim > threshold and not any(v > gt_sim for k, v in sims.items() if k != gt)
        else:
            ok = False  # a letter outside the options: wrong, the run goes on
        verdicts[rec["idx"]] = ok
        correct += ok
        cat = by_cat.setdefault(rec["question_category"], {"correct": 0, "total": 0})
        cat["correct"] += ok
        cat["total"] += 1
    total = len(sim["individual_results"])
    return {"accuracy": correct / total, "correct_count": correct, "total_count": total, "verdicts": verdicts,
            "category_wise_accuracy": {k: {"accuracy": v["correct"] / v["total"], **v} for k, v in by_cat.items()}}


# ---------------------------------------------------------------- the reference's sim files read by us


def sim_record(idx, gt, values, cat=CATS[0]):
    rec = raw_record(idx, "an answer", gt, cat)
    rec["cosine_similarities"] = dict(zip("ABCDE", values))
    return rec


def test_lower_case_ground_truth_is_scored_as_upper_case(tmp_path):
    sims = [0.30, 0.71, 0.20, 0.10, 0.05]
    path = write(tmp_path / "sim_ref.json", [sim_record(1, "b", sims), sim_record(2, "B", sims), sim_record(3, "a", sims)],
                 similarity_model="Qwen/Qwen3-Embedding-8B", similarity_calculated_at="2026-01-02T03:04:05")
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(path), "-q", "--bootstrap_resamples", "0"]) == 0
    ev = json.loads((tmp_path / "eval_ref.json").read_text())
    recs = {r["idx"]: r for r in ev["individual_results"]}
    assert recs[1]["is_correct"] is True and recs[2]["is_correct"] is True and recs[3]["is_correct"] is False
    assert recs[1]["ground_truth"] == "B" and recs[1]["ground_truth_as_given"] == "b"
    assert "ground_truth_as_given" not in recs[2]
    ref = reference_evaluate(json.loads(path.read_text()))
    assert {i: r["is_correct"] for i, r in recs.items()} == ref["verdicts"]
    assert ev["accuracy"] == ref["accuracy"]


def test_reference_failed_record_is_read_by_every_reader(tmp_path):
    failed = {"example_id": 7, "error": "CUDA out of memory. Tried to allocate 2.00 GiB"}
    path = write(tmp_path / "sim_ref.json", [sim_record(1, "B", [0.3, 0.7, 0.2, 0.1, 0.0]), failed],
                 similarity_model="m", similarity_calculated_at="2026-01-02T03:04:05")
    art = load_records_artifact(path)  # what the judge and the report read records with
    rec = art.records[1]
    assert rec.idx == 7 and rec.failed and rec.error.startswith("CUDA out of memory")
    assert rec.to_dict() == {"idx": 7, "error": failed["error"], "example_id": 7}
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(path), "-q", "--bootstrap_resamples", "50"]) == 0
    ev = json.loads((tmp_path / "eval_ref.json").read_text())
    out = {r["idx"]: r for r in ev["individual_results"]}
    assert out[7]["is_correct"] is False and out[7]["example_id"] == 7 and out[7]["failure_reason"] == "error"
    assert ev["total_count"] == 2 and ev["correct_count"] == 1
    assert ev["statistics"]["failed_samples"]["count"] == 1 and ev["statistics"]["overall"]["valid"]["total"] == 1
    assert "unknown" in ev["category_wise_accuracy"]  # the failed record names no category


@pytest.mark.parametrize("row, message", [
    ({"example_id": "seven", "error": "x"}, "'example_id' 'seven' is not an integer"),
    ({"example_id": 3}, "no 'error' marking a failed sample"),
])
def test_example_id_without_a_usable_failure_is_still_refused(row, message):
    from k9bench.artifact_io import ArtifactError

    with pytest.raises(ArtifactError, match=message):
        QuestionRecord.from_dict(row, where="f.json: record #4")


# ---------------------------------------------------------------- our files read by the reference


@pytest.mark.slow
def test_our_sim_file_reads_in_the_reference_loop_with_the_same_verdicts(tmp_path):
    answers = [("It is sitting down quietly", "A", 0), ("The dog runs fast", "b", 1), ("", "C", 2),
               ("barking at the cat", "D", 3), ("   ", "E", 4), ("The dog sits", "E", 0)]
    recs = [raw_record(i, a, gt, CATS[c]) for i, (a, gt, c) in enumerate(answers)]
    raw = write(tmp_path / "raw_FakeVLM_mf32_n6.json", recs)
    assert evaluate_results.main(["--mode", "all", "--input_file", str(raw), *small_model_args(), "--bootstrap_resamples", "0"]) == 0
    sim = json.loads((tmp_path / "sim_FakeVLM_mf32_n6.json").read_text())
    ev = json.loads((tmp_path / "eval_FakeVLM_mf32_n6.json").read_text())
    # every record carries all five similarities, the empty answers included (embedded like any text)
    for r in sim["individual_results"]:
        assert sorted(r["cosine_similarities"]) == list("ABCDE")
        assert all(-1.0 <= v <= 1.0 for v in r["cosine_similarities"].values())
    empties = {r["idx"]: r for r in sim["individual_results"] if not r["answer"].strip()}
    assert {i: r["answer_flag"] for i, r in empties.items()} == {2: "empty_answer", 4: "blank_answer"}
    assert sim["similarity_run"]["embedded_empty_answers"] == 2 and sim["similarity_run"]["batch_invariant"] is True

    ref = reference_evaluate(sim)  # would raise KeyError on a record without similarities
    ours = {r["idx"]: r["is_correct"] for r in ev["individual_results"]}
    # the empty and blank answers are decided by their similarities in both (here far below the threshold)
    assert ours[2] is ours[4] is False and ref["verdicts"][2] is ref["verdicts"][4] is False
    assert ours == ref["verdicts"]
    assert (ev["accuracy"], ev["correct_count"], ev["total_count"]) == (ref["accuracy"], ref["correct_count"], ref["total_count"])
    assert {k: (v["correct"], v["total"]) for k, v in ev["category_wise_accuracy"].items()} == {
        k: (v["correct"], v["total"]) for k, v in ref["category_wise_accuracy"].items()}
    assert ev["statistics"]["empty_answers"] == 2
    flagged = {r["idx"]: r for r in ev["individual_results"] if r.get("answer_flag")}
    assert sorted(flagged) == [2, 4] and all("decided by its similarities" in r["evaluation_explanation"] for r in flagged.values())
    assert not any(r.get("failure_reason") for r in flagged.values())  # flagged and counted, never overridden
    # the lower-case letter was scored, and the letter as given kept
    rec1 = next(r for r in ev["individual_results"] if r["idx"] == 1)
    assert rec1["ground_truth"] == "B" and rec1["ground_truth_as_given"] == "b"


@pytest.mark.slow
def test_raw_file_with_a_reference_failed_record_is_scored(tmp_path):
    recs = [raw_record(0, "It is sitting down quietly", "A"), {"example_id": 1, "error": "Video not found: x.mp4"},
            raw_record(2, "The dog runs fast", "B", CATS[1])]
    raw = write(tmp_path / "raw_FakeVLM_mf32_n3.json", recs)
    assert evaluate_results.main(["--mode", "all", "--input_file", str(raw), *small_model_args(), "--bootstrap_resamples", "0"]) == 0
    sim = json.loads((tmp_path / "sim_FakeVLM_mf32_n3.json").read_text())
    failed = sim["individual_results"][1]
    assert failed["idx"] == 1 and failed["example_id"] == 1 and failed["similarity_skipped"] == "failed_sample"
    assert sim["similarity_run"]["skipped_records"] == {"failed_sample": 1}
    ev = json.loads((tmp_path / "eval_FakeVLM_mf32_n3.json").read_text())
    assert ev["total_count"] == 3 and ev["statistics"]["failed_samples"]["count"] == 1
    assert ev["individual_results"][1]["is_correct"] is False
    assert reference_evaluate(sim)["verdicts"][1] is False  # its placeholder similarities read as wrong there too


@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.5, 1.0])
def test_our_sim_file_with_failed_records_reads_in_the_reference_loop_and_they_stay_wrong(tmp_path, monkeypatch, threshold):
    """Issue 24: a failed record of ours carries cosine_similarities (0.0 for each option) next to its
    error, so the reference's evaluate, which reads every record's similarities, reads the file, and
    the failed records stay wrong at every threshold. (A stand-in embedder: no model needed.)"""
    import k9bench.scoring.embedding
    from tests.fake_embedder import FakeLoader

    monkeypatch.setattr(k9bench.scoring.embedding, "load_embedding_model", FakeLoader())
    recs = [raw_record(0, "the dog sits", "A"), raw_record(1, "the dog runs", "B", CATS[1]),
            {**raw_record(2, "", "C"), "response": "", "error": "CUDA out of memory", "error_class": "oom"},
            {"example_id": 3, "error": "Video not found: x.mp4"},  # the reference's own failed-sample form
            {**raw_record(4, "", "A"), "error": "decode failed", "error_class": "decode_error"}]
    raw = write(tmp_path / "raw_FakeVLM_mf32_n5.json", recs)
    sim_path, eval_path = tmp_path / "sim.json", tmp_path / "eval.json"
    assert evaluate_results.main(["--mode", "all", "--input_file", str(raw), "--output_file", str(eval_path), "--sim_file",
                                  str(sim_path), "--threshold", str(threshold), "--bootstrap_resamples", "0", "-q"]) == 0
    sim = json.loads(sim_path.read_text())
    failed = {r["idx"]: r for r in sim["individual_results"] if "error" in r}
    assert sorted(failed) == [2, 3, 4]
    for rec in failed.values():
        assert rec["cosine_similarities"] == dict.fromkeys("ABCDE", 0.0) and rec["similarity_skipped"] == "failed_sample"
    ref = reference_evaluate(sim, threshold=threshold)  # no KeyError: every record has its similarities
    assert [ref["verdicts"][i] for i in (2, 3, 4)] == [False, False, False]
    ev = json.loads(eval_path.read_text())
    ours = {r["idx"]: r["is_correct"] for r in ev["individual_results"]}
    assert ours == ref["verdicts"] and (ev["correct_count"], ev["total_count"]) == (ref["correct_count"], ref["total_count"])


# ---------------------------------------------------------------- GPU: the default reproduces per-record verdicts


def test_default_dtype_is_float32_on_gpu_and_cpu():
    for device in ("cuda", "cuda:1", "cpu"):
        choice = scoring_dtype("auto", device)
        assert choice.name == "float32" and not choice.explicit
    assert scoring_dtype("bfloat16", "cuda").name == "bfloat16" and scoring_dtype("bfloat16", "cuda").explicit


@pytest.mark.slow
def test_bf16_opt_in_is_recorded():
    from k9bench.scoring.embedding import load_embedding_model

    _, run = load_embedding_model(str(bundled_small_model_path()), device="cpu", dtype="bfloat16")
    assert run.dtype == "bfloat16" and run.batch_invariant is False and run.dtype_reason == "--dtype"
    assert any("flip near-tie verdicts" in n for n in run.notes)
    _, run32 = load_embedding_model(str(bundled_small_model_path()), device="cpu")
    assert run32.dtype == "float32" and run32.batch_invariant is True
    assert not any("flip" in n for n in run32.notes)
