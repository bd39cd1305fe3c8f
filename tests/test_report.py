"""The report (``evaluate_results.py --mode report``) on synthetic eval and judge files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from k9bench import CATEGORIES
from k9bench.artifact_io import write_json_atomic
from k9bench.data.published import PUBLISHED_ACCURACY, find_published_accuracy, normalize_model_name
from k9bench.report import (
    ReportError,
    ReportSettings,
    add_report_args,
    bootstrap_intervals,
    build_report,
    frame_series,
    load_judge,
    load_run,
    run_report,
    write_report,
)
from k9bench.settings import from_namespace
from k9bench.report.markdown import judge_markdown

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_eval(path: Path, *, model: str = "Qwen3-VL-4B-Instruct", frames: int = 32, hits: dict | None = None,
              per_cat: int = 4, durations: bool = True, ci: str | None = None, failed: int = 0) -> Path:
    """An eval file: ``per_cat`` questions per category, two per video; ``hits[category]`` correct in each."""
    hits = hits or {c: i % (per_cat + 1) for i, c in enumerate(CATEGORIES)}
    records, idx = [], 0
    for c in CATEGORIES:
        for j in range(per_cat):
            rec = {
                "idx": idx, "question_category": c, "video": f"vid{idx // 2:08d}.mp4", "scene_name": f"vid{idx // 2:08d}",
                "ground_truth": "A", "response": "{}", "answer": "x", "question": "q?", "options": [f"{k}. o" for k in "ABCDE"],
                "prompt": "p", "model_name": model, "max_frames": frames, "timestamp": "t",
                "cosine_similarities": {k: 0.1 for k in "ABCDE"}, "is_correct": j < hits[c],
                "evaluation_explanation": "e", "eval_mode": "fine",
            }
            if durations:
                rec["video_duration"] = 10.0 + 40.0 * (idx // 2)  # spreads over several bins
            records.append(rec)
            idx += 1
    for rec in records[-failed:] if failed else []:
        rec["error"] = "boom"
        rec["is_correct"] = False
    correct = sum(r["is_correct"] for r in records)
    cats = {}
    for c in CATEGORIES:
        cr = [r for r in records if r["question_category"] == c]
        k = sum(r["is_correct"] for r in cr)
        cats[c] = {"accuracy": k / len(cr), "correct": k, "total": len(cr)}
    data = {
        "evaluation_timestamp": "2026-01-01T00:00:00", "eval_mode": "fine", "threshold": 0.5,
        "accuracy": correct / len(records), "correct_count": correct, "total_count": len(records),
        "category_wise_accuracy": cats, "individual_results": records,
        "metadata": {"similarity_model": "m", "similarity_calculated_at": "t"},
    }
    if ci == "file":  # evaluate_results.py's statistics block (fractions)
        def block(k: int, n: int, half: float) -> dict:
            return {"all": {"accuracy": k / n, "correct": k, "total": n, "ci95": [max(k / n - half, 0), min(k / n + half, 1)]}}
        data["statistics"] = {"overall": block(correct, len(records), 0.05), "categories": {
            c: block(cats[c]["correct"], cats[c]["total"], 0.1) for c in CATEGORIES}}
    write_json_atomic(path, data)
    return path


def make_judge(path: Path, scores: tuple = (7, 6, 5, 8, 6), n: int = 4, bad: int = 0) -> Path:
    axes = ("Logic", "Factuality", "Accuracy", "Conciseness", "Overall")
    entries = []
    for i in range(n):
        entries.append({"idx": i, "video_url": "u", "scene_name": "s", "question_category": CATEGORIES[0], "question": "q",
                        "correct_answer": "a", "model_output": "o", "cot": "c", "scores": dict(zip(axes, scores)),
                        "judge_model": "gpt-4o", "timestamp": "t"})
    for i in range(bad):
        entries.append({"idx": 100 + i, "scores": {"Logic": 3}})
    write_json_atomic(path, entries)
    return path


def test_judge_table_averages_out_of_range_scores_as_given_and_ignores_extra_keys(tmp_path):
    """The judge keeps an out-of-range integer score as given (flagged in ``scores_out_of_range``) and extra keys
    in ``scores``, as the reference does: the table averages the former in and shows only the five axes."""
    axes = ("Logic", "Factuality", "Accuracy", "Conciseness", "Overall")
    rows = [((12, 6, 5, 8, 6), {"Helpfulness": 99, "note": "text"}), ((0, 6, 5, 8, -2), {})]
    entries = [{"idx": i, "video_url": "u", "scene_name": "s", "question_category": CATEGORIES[0], "question": "q",
                "correct_answer": "a", "model_output": "o", "cot": "c", "scores": {**dict(zip(axes, values)), **extra},
                "judge_model": "gpt-4o", "timestamp": "t", "scores_out_of_range": {"Logic": values[0]}}
               for i, (values, extra) in enumerate(rows)]
    path = write_json_atomic(tmp_path / "judge_m_mf32_n20.json", entries)
    judge = load_judge(path)
    assert judge.scored == 2 and judge.ignored == 0
    assert judge.scores == {"Logical": 60.0, "Factual": 60.0, "Concise": 80.0, "Accuracy": 50.0, "Overall": 20.0}
    table = judge_markdown([judge])
    head, _, row = table.splitlines()
    assert [c.strip() for c in head.split("|")[1:-1]] == ["Rank", "Model", "Source", "Logical", "Factual", "Concise", "Accuracy",
                                                          "Overall", "Scored"]
    assert [c.strip() for c in row.split("|")[4:10]] == ["60.00", "60.00", "80.00", "50.00", "20.00", "2"]
    assert "Helpfulness" not in table and "99" not in table


def test_an_eval_file_without_records_is_refused_in_one_line(tmp_path):
    """load_run reads with allow_empty=False: an eval file of no records (an earlier stage wrote nothing) is
    a ReportError naming it, not a row of zeros."""
    path = make_eval(tmp_path / "eval_m_mf32_n20.json")
    data = json.loads(path.read_text())
    data["individual_results"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError) as exc:
        load_run(path)
    assert str(exc.value) == f"{path}: no records in 'individual_results' (an earlier stage wrote nothing)"


def report_args(tmp_path: Path, *argv: str) -> ReportSettings:
    """Parse like evaluate_results.py would (its own flags plus add_report_args) and build the
    settings as its main() does."""
    from k9bench.cli import ArgumentParser  # add_report_args asks it which flags it has (parser.accepts)

    parser = ArgumentParser()
    parser.add_argument("--mode", choices=("calculate", "evaluate", "report"))
    parser.add_argument("--input_file", nargs="+")
    parser.add_argument("--output_file")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--embedding_model")
    parser.add_argument("--batch_size", type=int)
    parser.add_argument("--device")
    parser.add_argument("-v", "--verbose", action="count", default=0)
    parser.add_argument("-q", "--quiet", action="store_true")
    add_report_args(parser)
    return from_namespace(ReportSettings, parser.parse_args(["--mode", "report", "--report_dir", str(tmp_path / "rep"), *argv]))


def test_report_end_to_end_two_models_judge_published(tmp_path, capsys):
    a = make_eval(tmp_path / "eval_Qwen3-VL-4B-Instruct_mf32_n20.json", hits={c: 2 for c in CATEGORIES})
    b = make_eval(tmp_path / "eval_Qwen3-VL-8B-Instruct_mf32_n20.json", model="Qwen3-VL-8B-Instruct", hits={c: 3 for c in CATEGORIES})
    j = make_judge(tmp_path / "judge_Qwen3-VL-8B-Instruct_mf32_n20.json", bad=1)
    args = report_args(tmp_path, "--input_file", str(a), str(b), "--judge_files", str(j), "--published", "matching")
    assert run_report(args) == 0

    md = (tmp_path / "rep" / "report.md").read_text()
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    header = lines[0]
    assert header.split("|")[1:6] == [" Rank ", " Model ", " Source ", " Frames ", " Avg "]
    for head in ("Posture", "Action seq.", "Context", "Cause-effect", "Interaction"):
        assert head in header
    # ranked: 8B run (75%) > 4B run (50%) > paper 8B (28.8) > paper 4B (27.6)
    ranked = [ln.split("|")[2].strip() for ln in lines[1:5]]
    assert ranked == ["Qwen3-VL-8B-Instruct", "Qwen3-VL-4B-Instruct", "Qwen3-VL-8B", "Qwen3-VL-4B"]
    row_8b = lines[1]
    assert "| 75.0 [" in row_8b  # average with its bootstrap interval
    assert "| 28.8 |" in lines[3]
    # judge table: Table 3 columns, scaled x10, the bad entry left out
    judge_head = next(ln for ln in lines if "Logical" in ln)
    assert [c.strip() for c in judge_head.split("|")[4:9]] == ["Logical", "Factual", "Concise", "Accuracy", "Overall"]
    judge_row = next(ln for ln in lines if ln.startswith("| ") and "this run" in ln and "70.00" in ln)
    assert [c.strip() for c in judge_row.split("|")[4:10]] == ["70.00", "60.00", "80.00", "50.00", "60.00", "4"]
    assert "57.50" in md  # the paper's Qwen3-VL-8B judge row (matching)

    summary = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert [r["overall"]["accuracy"] for r in summary["runs"]] == [50.0, 75.0]
    assert summary["runs"][0]["ci_source"] == "bootstrap"
    for name in ("accuracy_by_category", "accuracy_by_duration"):
        assert Path(summary["plots"][name]).read_bytes()[:8] == PNG_MAGIC
    assert summary["plots"]["accuracy_vs_frames"] is None
    assert "frame-count plot" in md
    out = capsys.readouterr().out
    assert "Qwen3-VL-8B-Instruct" in out and "Logical" in out


def test_frame_sweep_gives_frames_plot_and_labels(tmp_path):
    files = [make_eval(tmp_path / f"eval_Qwen3-VL-8B-Instruct_mf{f}_n20.json", model="Qwen3-VL-8B-Instruct", frames=f,
                       hits={c: h for c in CATEGORIES}) for f, h in ((8, 1), (32, 2), (128, 3))]
    report = build_report([str(p) for p in files], published="all")
    assert [r.label for r in report.runs] == [f"Qwen3-VL-8B-Instruct @{f}f" for f in (8, 32, 128)]
    assert list(frame_series(report.runs)) == ["Qwen3-VL-8B-Instruct"]
    assert len(report.published) == len(PUBLISHED_ACCURACY)
    args = report_args(tmp_path, "--input_file", *map(str, files), "--published", "all")
    assert run_report(args) == 0
    assert (tmp_path / "rep" / "accuracy_vs_frames.png").read_bytes()[:8] == PNG_MAGIC


def test_missing_durations_skip_the_duration_plot(tmp_path):
    path = make_eval(tmp_path / "eval_m_mf32_n20.json", durations=False)
    args = report_args(tmp_path, "--input_file", str(path), "--output_file", str(tmp_path / "board.md"))
    assert run_report(args) == 0
    assert not (tmp_path / "rep" / "accuracy_by_duration.png").exists()
    md = (tmp_path / "board.md").read_text()
    assert "duration plot is skipped" in md
    assert (tmp_path / "rep" / "accuracy_by_category.png").exists()


def test_durations_are_binned(tmp_path):
    run = load_run(make_eval(tmp_path / "eval_m_mf32_n20.json", hits={c: 4 for c in CATEGORIES}))
    # videos 0..9 with durations 10, 50, 90, ..., 370 s, two questions each
    totals = {k: v.total for k, v in run.durations.items()}
    # the paper's short-video cut (150 s) and Figure 3(c)'s edges (180 s, 300 s) are bin edges
    assert totals == {"0-30 s": 2, "30-60 s": 2, "60-150 s": 4, "150-180 s": 2, "180-300 s": 6, "300+ s": 4}
    assert all(v.accuracy == 100.0 for v in run.durations.values())


def test_interval_from_file_is_used_and_scaled(tmp_path):
    """evaluate_results.py's statistics block (fractions) is read, in percent; 20 questions per category
    over 10 videos each are enough for an interval."""
    run = load_run(make_eval(tmp_path / "eval_m_mf32_n100.json", per_cat=20, hits={c: 10 for c in CATEGORIES}, ci="file"))
    assert run.ci_source == "file"
    assert run.overall.ci == pytest.approx((45.0, 55.0))
    assert run.categories[CATEGORIES[0]].ci == pytest.approx((40.0, 60.0))


def test_intervals_from_fewer_than_ten_videos_are_na_never_zero_width(tmp_path):
    """A bootstrap over 3 videos gives [0.0, 0.0] for a run that got everything wrong: shown as n/a."""
    path = make_eval(tmp_path / "eval_m_mf32_n6.json", per_cat=2, hits={c: 0 for c in CATEGORIES})
    data = json.loads(path.read_text())
    data["individual_results"] = data["individual_results"][:6]  # 3 videos, every answer wrong
    data["total_count"], data["correct_count"] = 6, 0
    path.write_text(json.dumps(data))
    run = load_run(path)
    assert run.overall.videos == 3 and run.overall.ci is None and run.overall.too_few_videos
    md = Path(write_report(build_report([str(path)]), tmp_path / "rep")["markdown"]).read_text()
    assert "0.0 [n/a]" in md and "[0.0, 0.0]" not in md
    assert "fewer than 10 videos" in md
    # a file's own interval over too few videos is not shown either
    small = load_run(make_eval(tmp_path / "eval_s_mf32_n20.json", ci="file"))
    assert small.ci_source == "file" and small.overall.ci is not None  # 10 videos
    assert all(score.ci is None for score in small.categories.values())  # 2 videos each


def test_bootstrap_is_seeded_and_contains_the_estimate(tmp_path):
    run_path = make_eval(tmp_path / "eval_m_mf32_n40.json", per_cat=8, hits={c: 3 + i for i, c in enumerate(CATEGORIES)})
    from k9bench.artifacts import load_records_artifact

    records = load_records_artifact(run_path).records
    first, second = bootstrap_intervals(records), bootstrap_intervals(records)
    assert first == second
    point = 100.0 * sum(bool(r.is_correct) for r in records) / len(records)
    assert first["overall"][0] <= point <= first["overall"][1]
    assert first["overall"][0] < first["overall"][1]
    assert set(first) == {"overall", *CATEGORIES}


def test_failed_records_count_as_wrong(tmp_path):
    run = load_run(make_eval(tmp_path / "eval_m_mf32_n20.json", hits={c: 4 for c in CATEGORIES}, failed=3))
    assert run.failed == 3
    assert run.overall.correct == 17 and run.overall.total == 20


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("{not json", "invalid JSON"),
        (json.dumps({"individual_results": [{"idx": 0, "answer": "x"}], "total_count": 1}), "not an eval file"),
        (json.dumps({"foo": 1}), "individual_results"),
    ],
)
def test_bad_inputs_name_the_file(tmp_path, caplog, content, message):
    path = tmp_path / "eval_bad.json"
    if content is not None:
        path.write_text(content)
    args = report_args(tmp_path, "--input_file", str(path))
    assert run_report(args) == 1
    assert message in caplog.text and str(path) in caplog.text
    assert not (tmp_path / "rep" / "report.md").exists()


def test_bad_judge_file_and_labels(tmp_path):
    good = make_eval(tmp_path / "eval_m_mf32_n20.json")
    (tmp_path / "judge.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(ReportError, match="judge.json"):
        load_judge(tmp_path / "judge.json")
    empty = make_judge(tmp_path / "judge_empty.json", n=0, bad=2)
    nothing = load_judge(empty)
    assert (nothing.scored, nothing.ignored, nothing.label) == (0, 2, "empty")
    report = build_report([str(good)], [str(empty)])
    written = write_report(report, tmp_path / "rep")
    md = Path(written["markdown"]).read_text()
    assert "0 entries scored, 2 without complete scores" in md
    with pytest.raises(ReportError, match="--labels"):
        build_report([str(good)], labels=["a", "b"])
    report = build_report([str(good)], labels=["mine"])
    assert report.runs[0].label == "mine"


def test_published_matching():
    assert find_published_accuracy("Qwen/Qwen3-VL-4B-Instruct").average == 27.6
    assert find_published_accuracy("Qwen3-VL-4B-Thinking").average == 22.4
    assert find_published_accuracy("my-tiny-model") is None
    assert normalize_model_name("Gemini-2.5 Pro (1 FPS)") == normalize_model_name("gemini 2.5 pro")
    for row in PUBLISHED_ACCURACY:
        assert set(row.categories) == set(CATEGORIES)
        # the paper's average sits within the range of its categories
        assert min(row.categories.values()) - 0.05 <= row.average <= max(row.categories.values()) + 0.05


def test_report_reads_intervals_written_by_evaluate_results(tmp_path):
    """evaluate_results.py --mode evaluate on a sim file, then --mode report on its eval file."""
    import evaluate_results

    sim = json.loads(make_eval(tmp_path / "tmp.json", per_cat=6).read_text())
    for rec in sim["individual_results"]:
        for key in ("is_correct", "evaluation_explanation", "eval_mode"):
            rec.pop(key)
        rec["cosine_similarities"] = {k: (0.9 if k == ("A" if rec["idx"] % 3 else "B") else 0.2) for k in "ABCDE"}
    sim_data = {"individual_results": sim["individual_results"], "total_count": 30, "similarity_model": "m",
                "similarity_calculated_at": "t"}
    write_json_atomic(tmp_path / "sim_m_mf32_n30.json", sim_data)
    eval_path = tmp_path / "eval_m_mf32_n30.json"
    assert evaluate_results.main(["--mode", "evaluate", "--input_file", str(tmp_path / "sim_m_mf32_n30.json"),
                                  "--output_file", str(eval_path), "-q"]) == 0
    data = json.loads(eval_path.read_text())
    run = load_run(eval_path)
    assert run.ci_source == "file"
    assert run.overall.correct == data["correct_count"] == 20
    low, high = data["statistics"]["overall"]["all"]["ci95"]
    assert run.overall.ci == pytest.approx((100 * low, 100 * high))
    assert run.categories[CATEGORIES[1]].ci is None  # 6 questions over 3 videos: n/a
    assert evaluate_results.main(["--mode", "report", "--input_file", str(eval_path), "--report_dir", str(tmp_path / "rep"), "-q"]) == 0
    assert f"| {100 * 20 / 30:.1f} [{100 * low:.1f}, {100 * high:.1f}] |" in (tmp_path / "rep" / "report.md").read_text()


def test_older_threshold_results_layout_loads(tmp_path):
    """Eval files whose records sit under threshold_results -> <key> (an older reference layout)."""
    flat = json.loads(make_eval(tmp_path / "flat.json", hits={c: 1 for c in CATEGORIES}).read_text())
    nested = {"model": "m", "threshold_results": {"0.5": {k: v for k, v in flat.items()}}}
    path = tmp_path / "eval_old_mf32_n20.json"
    path.write_text(json.dumps(nested))
    run = load_run(path)
    assert (run.overall.correct, run.overall.total) == (5, 20)
    assert run.categories[CATEGORIES[2]].accuracy == 25.0


def test_notes_head_the_report(tmp_path):
    """--note lines (the launcher's demo uses one: random weights, meaningless scores) open report.md."""
    path = make_eval(tmp_path / "eval_m_mf32_n20.json")
    args = report_args(tmp_path, "--input_file", str(path), "--note", "DEMO: scores are MEANINGLESS", "--note", "second")
    assert run_report(args) == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert md.index("**DEMO: scores are MEANINGLESS**") < md.index("## MCQ accuracy")
    assert "**second**" in md
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["caller_notes"] == ["DEMO: scores are MEANINGLESS", "second"]


def test_judge_rows_take_the_label_of_the_eval_file_they_judged(tmp_path):
    """Table 3 names a run as Table 1 does: through the judge's meta sidecar (input file and its
    sha256), else through the judge file name; the paper row is found from the run's model."""
    a = make_eval(tmp_path / "eval_Qwen3-VL-8B-Instruct_mf32_n20.json", model="Qwen3-VL-8B-Instruct")
    b = make_eval(tmp_path / "eval_Qwen3-VL-4B-Instruct_mf32_n20.json")
    by_sidecar = make_judge(tmp_path / "scores_run1.json")
    (tmp_path / "scores_run1.json.meta.json").write_text(json.dumps({"input": {
        "evaluations": "moved/elsewhere.json", "sha256": hashlib.sha256(a.read_bytes()).hexdigest()}}))
    by_name = make_judge(tmp_path / "judge_Qwen3-VL-4B-Instruct_mf32_n20.json", scores=(5, 5, 5, 5, 5))
    report = build_report([str(a), str(b)], [str(by_sidecar), str(by_name)], published="matching", labels=["eight", "four"])
    assert [(j.label, j.model) for j in report.judges] == [("eight", "Qwen3-VL-8B-Instruct"), ("four", "Qwen3-VL-4B-Instruct")]
    md = Path(write_report(report, tmp_path / "rep")["markdown"]).read_text()
    judge_part = md.split("## Judge scores")[1]
    assert "| eight | this run |" in judge_part and "| four | this run |" in judge_part
    assert "| Qwen3-VL-8B | paper | 57.50 |" in judge_part  # matched through the run's model, not the label
