"""Judge reply parsing, prompt templates, tasks from records and summary maths (table-driven, no network)."""

from __future__ import annotations

import json

import pytest

from k9bench.artifacts import QuestionRecord
from k9bench.judge import (
    AXES,
    JudgeInputError,
    JudgeParseError,
    axis_means,
    build_tasks,
    check_prompt_template,
    cross_check,
    option_text,
    parse_judgement,
    render_prompt,
    summarize,
    task_from_record,
)
from k9bench.prompts import load_prompt

GOOD = {"Logic": 8, "Factuality": 7, "Accuracy": 6, "Conciseness": 9, "Overall": 7}
DICT_SQ = "{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}"
DICT_JSON = json.dumps(GOOD)

PARSE_OK = [
    # (case, reply, expected cot)
    ("plain single quotes", f"CoT: matches the reference.\n{DICT_SQ}", "matches the reference."),
    ("json double quotes", f"CoT: ok\n{DICT_JSON}", "ok"),
    ("python fence", f"CoT: fine\n```python\n{DICT_SQ}\n```", "fine"),
    ("json fence", f"CoT: fine\n```json\n{DICT_JSON}\n```\n", "fine"),
    ("bare fence", f"```\nCoT: fenced too\n{DICT_SQ}\n```", "fenced too"),
    ("bold label", f"**CoT:** bold label\n\n{DICT_SQ}", "bold label"),
    ("multi-line cot", f"CoT: first line\nsecond line\n{DICT_SQ}", "first line second line"),
    ("no cot", DICT_SQ, ""),
    ("trailing comma", "CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7,}", "x"),
    (
        "echoed template earlier, last block wins",
        "Format: {'Logic': X, 'Factuality': X, 'Accuracy': X, 'Conciseness': X, 'Overall': X}\nCoT: real\n" + DICT_SQ,
        "real",
    ),
    ("earlier valid dict, last one wins", "CoT: y\n{'Logic': 1, 'Factuality': 1, 'Accuracy': 1, 'Conciseness': 1, 'Overall': 1}\n" + DICT_SQ, "y"),
    ("text after the dict", f"CoT: z\n{DICT_SQ}\nHope this helps.", "z"),
]


@pytest.mark.parametrize("case, reply, cot", PARSE_OK, ids=[c[0] for c in PARSE_OK])
def test_parse_accepts(case, reply, cot):
    j = parse_judgement(reply)
    assert j.scores == GOOD and list(j.scores) == list(AXES)
    assert j.cot == cot


def test_extra_keys_are_kept_after_the_axes_as_written():
    """Issue 24 item 1: the reference keeps extra keys in ``scores`` (they were dropped before)."""
    j = parse_judgement("CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7, 'Note': 'n/a', 'logic': 3}")
    assert j.scores == {**GOOD, "Note": "n/a", "logic": 3} and list(j.scores)[:5] == list(AXES)
    assert j.adjustments == {}


PARSE_FAIL = [
    # (case, reply, message fragment)
    ("empty", "", "empty reply"),
    ("none", None, "empty reply"),
    ("no dict", "CoT: I think it is good. Logic 8, Overall 7.", "no {...}"),
    ("missing key", "CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'Overall': 7}", "Conciseness"),
    # issue 24 item 1: lower-case keys skip the entry, as the reference skips it (they were matched before)
    ("lower-case keys", "CoT: x\n{'logic': 8, 'factuality': 7, 'accuracy': 6, 'conciseness': 9, 'overall': 7}",
     "missing score key(s): Logic, Factuality, Accuracy, Conciseness, Overall (found 'logic', 'factuality'"),
    ("one key in another case", "CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accuracy': 6, 'conciseness': 9, 'Overall': 7}",
     "missing score key(s): Conciseness (found 'conciseness'"),
    ("placeholder X", "CoT: x\n{'Logic': X, 'Factuality': X, 'Accuracy': X, 'Conciseness': X, 'Overall': X}", "neither JSON nor"),
    ("non-integer string", "CoT: x\n{'Logic': '7.5', 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}", "not an integer"),
    ("word", "CoT: x\n{'Logic': 'eight', 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}", "not an integer"),
    ("nan", 'CoT: x\n{"Logic": NaN, "Factuality": 7, "Accuracy": 6, "Conciseness": 9, "Overall": 7}', "not an integer"),
    ("infinity", 'CoT: x\n{"Logic": Infinity, "Factuality": 7, "Accuracy": 6, "Conciseness": 9, "Overall": 7}', "not an integer"),
    ("null", 'CoT: x\n{"Logic": null, "Factuality": 7, "Accuracy": 6, "Conciseness": 9, "Overall": 7}', "not an integer"),
    ("set not dict", "CoT: x\n{8, 7, 6, 9, 7}", "not a dictionary"),
    ("truncated", "CoT: x\n{'Logic': 8, 'Factuality': 7, 'Accur", "no {...}"),
    ("last block broken", f"CoT: x\n{DICT_SQ}\n{{'Overall': }}", "neither JSON nor"),
    ("code injection is not evaluated", "{'Logic': __import__('os').getpid(), 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}", "neither JSON nor"),
]


@pytest.mark.parametrize("case, reply, fragment", PARSE_FAIL, ids=[c[0] for c in PARSE_FAIL])
def test_parse_refuses(case, reply, fragment):
    with pytest.raises(JudgeParseError, match=None) as info:
        parse_judgement(reply)
    assert fragment in str(info.value)


PARSE_ADJUSTED = [
    # (case, Logic as written, Logic read) -- SPEC section 9: the reference's int() on each score
    ("numeric string", "'9'", 9),
    ("numeric string with spaces", "' 8 '", 8),
    ("non-integer truncated", "7.5", 7),
    ("non-integer truncated toward zero", "10.9", 10),
    ("just above 1", "1.2", 1),
]


PARSE_OUT_OF_RANGE = [
    # (case, Logic as written, Logic read) -- kept as given and flagged by default (the reference's int());
    # refused with strict=True (--strict_scores), as every one of them was before issue 24
    ("eleven", "11", 11),
    ("zero", "0", 0),
    ("negative", "-3", -3),
    ("float above range", "11.0", 11),
    ("fraction truncated to 0", "0.5", 0),
    ("string out of range", "'0'", 0),
    ("true", "True", 1),
    ("false", "False", 0),
]


@pytest.mark.parametrize("case, written, read", PARSE_OUT_OF_RANGE, ids=[c[0] for c in PARSE_OUT_OF_RANGE])
def test_out_of_range_and_bool_scores_are_kept_and_flagged_unless_strict(case, written, read):
    reply = f"CoT: x\n{{'Logic': {written}, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}}"
    j = parse_judgement(reply)
    assert j.scores == {**GOOD, "Logic": read} and type(j.scores["Logic"]) is int
    assert j.adjustments == {"Logic": eval(written)}
    assert j.out_of_range == ([] if 1 <= read <= 10 else ["Logic"])
    with pytest.raises(JudgeParseError) as info:
        parse_judgement(reply, strict=True)
    assert "'Logic'" in str(info.value) and ("outside 1-10 (--strict_scores)" in str(info.value) or "not an integer 1-10" in str(info.value))


@pytest.mark.parametrize("case, written, read", PARSE_ADJUSTED, ids=[c[0] for c in PARSE_ADJUSTED])
def test_parse_reads_scores_the_reference_way_and_flags_them(case, written, read):
    j = parse_judgement(f"CoT: x\n{{'Logic': {written}, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': 7}}")
    assert j.scores == {**GOOD, "Logic": read}
    assert j.adjustments == {"Logic": eval(written)}  # the value as the judge wrote it
    assert all(isinstance(v, int) for v in j.scores.values())


def test_plain_and_whole_float_scores_are_not_flagged():
    assert parse_judgement(DICT_SQ).adjustments == {}
    assert parse_judgement(DICT_SQ.replace("8", "8.0")).adjustments == {}  # 8.0 is exactly 8


# -- prompt --------------------------------------------------------------------


def test_builtin_prompt_renders_and_keeps_the_score_format():
    template, source = load_prompt("judge_prompt")
    check_prompt_template(template, source)
    text = render_prompt(template, question="Q {odd}?", correct_answer="REF", model_output="ANS {x}")
    assert "Q {odd}?" in text and "REF" in text and "ANS {x}" in text  # values are not re-formatted
    assert "CoT:" in text
    assert "{'Logic': X, 'Factuality': X, 'Accuracy': X, 'Conciseness': X, 'Overall': X}" in text
    for axis in AXES:
        assert f"- {axis}:" in text


@pytest.mark.parametrize(
    "template, fragment",
    [
        ("Q {question} A {correct_answer}", "lacks the placeholder(s) {model_output}"),
        ("{question} {correct_answer} {model_output} {'Logic': X}", "unknown placeholder"),
        ("{question} {correct_answer} {model_output} {", "not a valid template"),
        ("{question} {correct_answer} {model_output} {video}", "unknown placeholder(s) {video}"),
        # issue 23: a huge format spec would build a string that wide (MemoryError): refused before any request
        ("{question} {correct_answer} {model_output:>99999999999}", "placeholder(s) {model_output} carry a format spec"),
        ("{question!r} {correct_answer} {model_output}", "placeholder(s) {question} carry a format spec or conversion"),
        ("{question.__class__} {correct_answer} {model_output}", "unknown placeholder(s) {question.__class__}"),
        ("", "lacks the placeholder(s) {question}, {correct_answer}, {model_output}"),
    ],
)
def test_bad_prompt_templates_are_refused(template, fragment):
    with pytest.raises(JudgeInputError) as info:
        check_prompt_template(template, "my_prompt.txt")
    assert "my_prompt.txt" in str(info.value) and fragment in str(info.value)


# -- tasks from records -----------------------------------------------------------


@pytest.mark.parametrize(
    "options, letter, expected",
    [
        (["A. alpha", "B. beta", "C. gamma", "D. delta", "E. eps"], "B", "beta"),
        (["A) alpha", "B) beta"], "B", "beta"),
        ({"A": "alpha", "C": "gamma"}, "C", "gamma"),
        (["A. alpha"], "D", None),
        (None, "A", None),
    ],
)
def test_option_text(options, letter, expected):
    assert option_text(options, letter) == expected


def _record(**kw):
    base = dict(
        idx=5,
        question_category="posture analysis",
        video="abcdefghijk.mp4",
        ground_truth="C",
        response="r",
        answer="the dog sits",
        scene_name="",
        question="What does the dog do?",
        options=["A. runs", "B. jumps", "C. sits", "D. sleeps", "E. barks"],
    )
    base.update(kw)
    return QuestionRecord.from_dict(base)


def test_task_from_record_takes_ground_truth_from_the_record():
    task, problems = task_from_record(_record())
    assert problems == []
    assert task.correct_answer == "sits" and task.ground_truth == "C" and task.model_output == "the dog sits"
    assert task.scene_name == "abcdefghijk" and task.video_url == "https://www.youtube.com/watch?v=abcdefghijk"


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"ground_truth": "F"}, "ground_truth 'F'"),
        ({"ground_truth": ""}, "ground_truth ''"),
        ({"options": ["A. runs", "B. jumps"]}, "no text for the ground-truth letter C"),
        ({"question": "  "}, "question is empty"),
    ],
)
def test_task_problems(fields, fragment):
    task, problems = task_from_record(_record(**fields))
    assert task is None and any(fragment in p for p in problems)


def test_build_tasks_reports_every_problem_with_idx(tmp_path):
    recs = [_record(idx=i).to_dict() for i in range(4)]
    recs[1]["ground_truth"] = "Z"
    recs[3]["options"] = ["A. runs"]
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"individual_results": recs}))
    with pytest.raises(JudgeInputError) as info:
        build_tasks(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg and "2 record problem(s)" in msg
    assert "idx 1 (record #1): ground_truth 'Z'" in msg and "idx 3 (record #3): options have no text" in msg
    recs[3] = {**recs[0]}  # a duplicate idx: refused naming both positions (by the one artifact reader)
    path.write_text(json.dumps({"individual_results": recs}))
    with pytest.raises(JudgeInputError) as info:
        build_tasks(path)
    assert str(path) in str(info.value) and "idx 0" in str(info.value) and "#0" in str(info.value) and "#3" in str(info.value)


def test_build_tasks_older_threshold_layout_and_failed_records(tmp_path):
    recs = [_record(idx=i).to_dict() for i in (3, 1, 2)]
    recs[2] = {"idx": 2, "question": "q", "error": "CUDA out of memory", "error_class": "oom"}
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"threshold_results": {"0.5": {"individual_results": recs, "accuracy": 0.5}}}))
    ts = build_tasks(path)
    assert [t.idx for t in ts.tasks] == [1, 3]
    assert ts.failed == [{"idx": 2, "error": "CUDA out of memory", "error_class": "oom"}]
    assert ts.total_records == 3


def test_cross_check_reports_each_differing_field():
    from k9bench.data.dataset import load_questions

    questions = load_questions("demo").questions
    q = questions[0]
    good, _ = task_from_record(_record(idx=q.idx, question=q.question, question_category=q.category, scene_name=q.scene_name,
                                       ground_truth=q.correct_answer, options=q.option_list))
    assert cross_check([good], questions) == []
    bad, _ = task_from_record(_record(idx=q.idx, question="another question", question_category=q.category,
                                      scene_name=q.scene_name, ground_truth="E", options=q.option_list))
    fields = {m["field"] for m in cross_check([bad], questions)}
    assert fields == {"question", "ground_truth", "correct_answer"}
    missing, _ = task_from_record(_record(idx=99999))
    assert cross_check([missing], questions) == [{"idx": 99999, "field": "idx", "record": 99999, "dataset": None}]


# -- summary ------------------------------------------------------------------------


def _entry(idx, cat, logic, overall):
    return {"idx": idx, "question_category": cat, "scores": {"Logic": logic, "Factuality": 5, "Accuracy": 4, "Conciseness": 10, "Overall": overall},
            "judge_usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110, "requests": 1}}


def test_axis_means_in_table3_order_and_scaled():
    means = axis_means([_entry(0, "a", 7, 6), _entry(1, "a", 8, 7)])
    assert list(means) == ["Logical", "Factual", "Concise", "Accuracy", "Overall"]
    assert means["Logical"] == {"key": "Logic", "mean_1_10": 7.5, "score_0_100": 75.0, "n": 2}
    assert means["Concise"]["score_0_100"] == 100.0 and means["Overall"]["mean_1_10"] == 6.5
    assert axis_means([])["Logical"]["mean_1_10"] is None


def test_summarize_counts_categories_and_usage():
    entries = [_entry(0, "action sequence", 7, 6), _entry(1, "posture analysis", 9, 9), _entry(2, "posture analysis", 5, 5)]
    skipped = [{"idx": 3, "error": "parse failure", "judge_usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55, "requests": 1}}]
    s = summarize(entries, skipped, [{"idx": 4}], usage_this_run={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "requests": 0})
    assert s["counts"] == {"scored": 3, "skipped": 1, "failed_at_inference": 1}
    assert list(s["per_category"]) == ["posture analysis", "action sequence"]  # released order
    assert s["per_category"]["posture analysis"]["axes"]["Logical"]["score_0_100"] == 70.0
    assert s["usage"]["entries_and_skipped"] == {"prompt_tokens": 350, "completion_tokens": 35, "total_tokens": 385, "requests": 4}
    assert s["skipped_idx"] == [3] and s["failed_at_inference_idx"] == [4]
