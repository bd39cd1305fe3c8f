"""Answer extraction (SPEC section 3 plus thinking tags and code fences), table-driven."""

from __future__ import annotations

import pytest

from k9bench.answers import extract_answer, iter_brace_blocks, prompt_opens_thinking, strip_code_fences, strip_thinking

CASES = [
    # (id, response, expected answer, expected method)
    ("plain_json", '{"reasoning": "It lies down.", "answer": "The dog rests."}', "The dog rests.", "json"),
    ("json_whitespace", '\n  {"reasoning": "r", "answer": "  Sits.  "}\n', "Sits.", "json"),
    ("json_key_order", '{"answer": "Barks.", "reasoning": "r"}', "Barks.", "json"),
    ("json_unicode", '{"reasoning": "r", "answer": "Le chien s\\u2019assoit."}', "Le chien s\u2019assoit.", "json"),
    ("json_non_string_answer", '{"reasoning": "r", "answer": 3}', "3", "json"),
    ("json_null_answer", '{"reasoning": "r", "answer": null}', "", "json"),
    ("json_without_answer_falls_to_raw", '{"reasoning": "r"}', '{"reasoning": "r"}', "raw"),
    ("prose_then_json", 'Sure! Here it is: {"reasoning": "r", "answer": "It plays."} Hope that helps.', "It plays.", "json_block"),
    ("first_valid_block_wins", 'x {"answer": "first"} y {"answer": "second"}', "first", "json_block"),
    ("skips_block_without_answer", '{"note": 1} then {"reasoning": "r", "answer": "second"}', "second", "json_block"),
    ("nested_braces", 'Result: {"reasoning": {"step1": "a"}, "answer": "Nested ok."}', "Nested ok.", "json_block"),
    ("brace_inside_string", 'Out: {"reasoning": "a } b {", "answer": "Braces."}', "Braces.", "json_block"),
    ("truncated_json_regex", '{"reasoning": "long...", "answer": "The dog jumps."', "The dog jumps.", "regex"),
    ("unescaped_quote_regex", '{"reasoning": "he said "sit"", "answer": "It sits."}', "It sits.", "regex"),
    ("regex_escapes_decoded", '{"reasoning": "x, "answer": "A \\"quoted\\" word"', 'A "quoted" word', "regex"),
    ("regex_spacing", '"answer" :   "Spaced."', "Spaced.", "regex"),
    ("raw_text", "The dog is chasing its tail.", "The dog is chasing its tail.", "raw"),
    ("raw_empty", "", "", "raw"),
    ("raw_whitespace", "   \n", "", "raw"),
    ("fence_json", '```json\n{"reasoning": "r", "answer": "Fenced."}\n```', "Fenced.", "json"),
    ("fence_plain", '```\n{"reasoning": "r", "answer": "Plain fence."}\n```', "Plain fence.", "json"),
    ("fence_with_prose", 'Answer below.\n```json\n{"reasoning": "r", "answer": "In fence."}\n```\nDone.', "In fence.", "json"),
    ("fence_unterminated", '```json\n{"reasoning": "r", "answer": "Cut fence."}', "Cut fence.", "json"),
    ("think_block", '<think>\nThe dog seems calm.\n</think>\n\n{"reasoning": "r", "answer": "Calm."}', "Calm.", "json"),
    ("think_opened_in_prompt", 'The dog seems calm, so...\n</think>\n{"reasoning": "r", "answer": "Calm."}', "Calm.", "json"),
    ("think_with_json_inside", '<think>maybe {"answer": "wrong"}</think>{"reasoning": "r", "answer": "right"}', "right", "json"),
    ("think_then_fence", '<think>hm</think>\n```json\n{"reasoning": "r", "answer": "Both."}\n```', "Both.", "json"),
    ("think_unclosed", '<think>still thinking about {"answer": "guess"}', "guess", "json_block"),
    ("think_empty_block", '<think>\n\n</think>\n\n{"reasoning": "r", "answer": "Empty think."}', "Empty think.", "json"),
    ("think_only_raw", "<think>no answer</think>", "", "raw"),
]


@pytest.mark.parametrize("response, expected, method", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_extract_answer(response, expected, method):
    got = extract_answer(response)
    assert (got.answer, got.method) == (expected, method)


@pytest.mark.parametrize(
    "text, rest, thinking",
    [
        ("no tags", "no tags", None),
        ("<think>a</think>b", "b", "a"),
        ("<think>a</think>b<think>c</think>d", "bd", "a\nc"),
        ("a</think>b", "b", "a"),
        ("<think>a", "a", None),
    ],
)
def test_strip_thinking(text, rest, thinking):
    assert strip_thinking(text) == (rest, thinking)


def test_thinking_kept_in_extraction():
    got = extract_answer('<think>reason here</think>{"answer": "x"}')
    assert got.thinking == "reason here" and got.answer == "x"


def test_code_fence_without_json_left_alone():
    text = "Use ```print(1)``` here"
    assert strip_code_fences(text) == text


def test_brace_blocks_in_order():
    assert list(iter_brace_blocks('a {"x": {"y": 1}} b {} {')) == ['{"x": {"y": 1}}', '{"y": 1}', "{}"]


OPENED_CASES = [
    # (id, reply after a prompt ending in "<think>\n", answer, method, thinking, unfinished)
    ("closed", 'The dog sits.\n</think>\n\n{"reasoning": "r", "answer": "Sits."}', "Sits.", "json", "The dog sits.", False),
    ("cut_in_reasoning", "The dog seems to sit, then", "The dog seems to sit, then", "raw", None, True),
    ("cut_with_draft", 'maybe {"answer": "draft"} and', "draft", "json_block", None, True),
    ("model_repeats_open_tag", '<think>hm</think>{"answer": "x"}', "x", "json", "hm", False),
    ("empty", "", "", "raw", None, True),
]


@pytest.mark.parametrize("reply, answer, method, thinking, unfinished", [c[1:] for c in OPENED_CASES], ids=[c[0] for c in OPENED_CASES])
def test_prompt_opened_thinking(reply, answer, method, thinking, unfinished):
    got = extract_answer(reply, thinking_opened=True)
    assert (got.answer, got.method, got.thinking, got.thinking_unfinished) == (answer, method, thinking, unfinished)
    # the answer never depends on knowing the prompt; only the flag does
    assert extract_answer(reply).answer == answer


@pytest.mark.parametrize(
    "prompt, opened",
    [("<|im_start|>assistant\n<think>\n", True), ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
     ("<|im_start|>assistant\n", False), ("", False), (None, False)],
)
def test_prompt_opens_thinking(prompt, opened):
    assert prompt_opens_thinking(prompt) is opened


def test_unclosed_think_in_reply_is_flagged():
    assert extract_answer('<think>still {"answer": "guess"}').thinking_unfinished is True
    assert extract_answer('{"answer": "done"}').thinking_unfinished is False
