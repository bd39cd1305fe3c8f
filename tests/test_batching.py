"""Batch planning across videos, the HF backend's --batch_size auto rule and the look-ahead preparation pool."""

from __future__ import annotations

import threading
import time

import pytest

from types import SimpleNamespace

from k9bench.inference.batching import given_batch_size, halve_batch_size, parse_batch_size
from k9bench.inference.batching import plan_batches as plan_lazily
from k9bench.inference.hf.batching import DEFAULT_MAX_AUTO_BATCH, MemoryModel, auto_batch_size, memory_model, prompt_tokens_estimate
from k9bench.inference.pipeline import AheadPipeline


def plan_batches(sizes, batch_size):
    return list(plan_lazily(sizes, batch_size))


def flatten(batches) -> list[tuple[int, int]]:
    return [(p.group, q) for b in batches for p in b.parts for q in range(p.start, p.stop)]


# --------------------------------------------------------------------------- plan_batches


def test_batches_span_videos_and_fill_up():
    sizes = [5, 5, 5, 5, 2]
    batches = plan_batches(sizes, 8)
    assert [b.size for b in batches] == [8, 8, 6]
    # every question once, videos kept together and in order
    assert flatten(batches) == [(g, q) for g, n in enumerate(sizes) for q in range(n)]
    # video 1 is split at the first boundary and released by the second batch
    assert [p.group for p in batches[0].parts] == [0, 1] and batches[0].release == (0,)
    assert batches[1].parts[0].group == 1 and batches[1].release == (1, 2)
    assert batches[2].release == (3, 4)


def test_every_video_is_released_exactly_once_after_its_last_question():
    sizes = [3, 0, 17, 1, 4, 9]
    for batch_size in (1, 2, 5, 8, 64):
        batches = plan_batches(sizes, batch_size)
        assert all(b.size <= batch_size for b in batches)
        released = [g for b in batches for g in b.release]
        assert sorted(released) == [g for g, n in enumerate(sizes) if n]
        for b_index, b in enumerate(batches):
            for g in b.release:  # nothing of a released video comes later
                assert all(p.group != g for later in batches[b_index + 1:] for p in later.parts)


def test_batch_size_1_is_one_question_per_batch_in_order():
    batches = plan_batches([2, 3], 1)
    assert [(b.parts[0].group, b.parts[0].start) for b in batches] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]


def test_the_batch_size_is_read_at_the_start_of_each_batch():
    """After an out-of-memory halving the next batches are planned at the new size (issue 36: no re-planning)."""
    size = {"now": 4}
    sizes = [3, 3, 3, 3]
    taken = []
    for batch in plan_lazily(sizes, lambda: size["now"]):
        taken.append(batch.size)
        size["now"] = 2
    assert taken == [4, 2, 2, 2, 2] and sum(taken) == 12


@pytest.mark.parametrize("bad", [dict(sizes=[1], batch_size=0), dict(sizes=[-1], batch_size=2)])
def test_bad_plans_are_refused(bad):
    with pytest.raises(ValueError):
        plan_batches(bad.pop("sizes"), bad.pop("batch_size"))


def test_prompt_tokens_estimate():
    # 32 frames of 360x420 pixels at most, patch 16: a 384-pixel square grid, 16 temporal pairs x (24 x 24 patches / 4)
    assert prompt_tokens_estimate(None, 16, max_frames=32, max_pixels=360 * 420) == 16 * (24 * 24 // 4) + 512
    fixed = SimpleNamespace(frame_size=(448, 448), frame_patch=(14, 1))  # InternVL: every frame its own 256 tokens
    assert prompt_tokens_estimate(fixed, None, max_frames=32, max_pixels=None) == 32 * 256 + 512
    assert prompt_tokens_estimate(None, 16, max_frames=0, max_pixels=None) == 512  # text only


# --------------------------------------------------------------------------- --batch_size auto


def test_batch_size_values():
    assert [parse_batch_size(v) for v in ("8", " 1 ", "auto", "AUTO", 3)] == [8, 1, "auto", "auto", 3]
    for bad in ("0", "-2", "eight", "1.5", ""):
        with pytest.raises(ValueError):
            parse_batch_size(bad)


QWEN3_VL_4B = SimpleNamespace(text_config=SimpleNamespace(num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                                                         head_dim=128, hidden_size=2560, intermediate_size=9728, vocab_size=151936))


def test_auto_is_1_on_cpu():
    choice = auto_batch_size(None, QWEN3_VL_4B, device="cpu")
    assert choice.batch_size == 1 and "CPU" in choice.reason and choice.to_dict()["history"] == [[1, "chosen"]]


def test_auto_fits_free_memory_and_halves_on_out_of_memory():
    kwargs = dict(device="cuda", prompt_tokens=2800, max_new_tokens=64, dtype_bytes=2)
    mem = memory_model(QWEN3_VL_4B, dtype_bytes=2, prompt_tokens=2800, max_new_tokens=64)
    choice = auto_batch_size(100 * 2**30, QWEN3_VL_4B, max_batch=1000, **kwargs)
    usable = int(100 * 2**30 * 0.85)
    assert mem.batch_bytes(choice.batch_size) <= usable < mem.batch_bytes(choice.batch_size + 1)
    assert choice.inputs["batch_bytes"] == mem.batch_bytes(choice.batch_size) and choice.inputs["row_bytes"] == mem.row_bytes()
    assert auto_batch_size(100 * 2**30, QWEN3_VL_4B, max_batch=16, **kwargs).batch_size == 16  # a cap
    assert auto_batch_size(100 * 2**30, QWEN3_VL_4B, questions=12, **kwargs).batch_size == 12
    assert auto_batch_size(2**30 // 2, QWEN3_VL_4B, **kwargs).batch_size == 1  # never below 1
    c = auto_batch_size(100 * 2**30, QWEN3_VL_4B, max_batch=64, **kwargs)
    assert c.halve() == 32 and c.halve() == 16
    assert c.to_dict()["history"] == [[64, "chosen"], [32, "out of memory"], [16, "out of memory"]]
    assert c.to_dict()["inputs"]["free_bytes"] == 100 * 2**30
    assert [halve_batch_size(n) for n in (1, 2, 3, 8)] == [1, 1, 1, 4]
    g = given_batch_size(8)
    assert g.batch_size == 8 and g.halve() == 4 and g.requested == "8"


def test_the_auto_cap_is_what_memory_allows_up_to_at_least_256():
    assert DEFAULT_MAX_AUTO_BATCH >= 256
    big = auto_batch_size(2**50, QWEN3_VL_4B, device="cuda", prompt_tokens=100, max_new_tokens=8)
    assert big.batch_size == DEFAULT_MAX_AUTO_BATCH and "capped" in big.reason
    small = auto_batch_size(40 * 2**30, QWEN3_VL_4B, device="cuda", prompt_tokens=2800, max_new_tokens=64)
    assert small.batch_size < DEFAULT_MAX_AUTO_BATCH and "capped" not in small.reason


def test_memory_model_from_a_qwen3_vl_4b_sized_config():
    mem = memory_model(QWEN3_VL_4B, dtype_bytes=2, prompt_tokens=2800, max_new_tokens=64)
    assert mem.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2 == 147456
    assert isinstance(mem, MemoryModel) and mem.prefill_bytes == 2800 * 9728 * 3 * 2
    # about 0.55 GiB per question row: its whole prompt's keys and values (0.39 GiB; each row holds its own prompt),
    # the MLP's prefill activations (0.15 GiB), its logits
    assert 0.5 * 2**30 < mem.row_bytes() < 0.6 * 2**30
    assert 64 < auto_batch_size(130 * 2**30, QWEN3_VL_4B, device="cuda", prompt_tokens=2800, max_new_tokens=64).batch_size < 256


# --------------------------------------------------------------------------- AheadPipeline


def test_pipeline_keeps_order_runs_ahead_and_bounds_depth():
    running = []
    peak = [0]
    lock = threading.Lock()

    def prepare(item: int) -> int:
        with lock:
            running.append(item)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.02 * (3 - item % 3))  # later items can finish first
        with lock:
            running.remove(item)
        return item * 10

    with AheadPipeline(prepare, workers=3, depth=3) as ahead:
        got = [(r.item, r.value) for r in ahead.run(range(9))]
    assert got == [(i, i * 10) for i in range(9)]
    assert peak[0] <= 3 and ahead.stats.prepared == 9 and ahead.stats.failed == 0
    assert ahead.stats.prepare_seconds > 0


def test_pipeline_hands_over_errors_in_place_and_measures_waiting():
    def prepare(item: int) -> int:
        time.sleep(0.05)
        if item == 1:
            raise ValueError("broken video")
        return item

    with AheadPipeline(prepare, workers=2, depth=2) as ahead:
        results = list(ahead.run([0, 1, 2]))
    assert [r.value for r in results] == [0, None, 2]
    assert isinstance(results[1].error, ValueError) and ahead.stats.failed == 1
    assert ahead.stats.wait_seconds >= 0.04  # the first item was not ready at once


def test_pipeline_prepares_the_next_item_while_the_consumer_works():
    def prepare(item: int) -> int:
        time.sleep(0.05)
        return item

    with AheadPipeline(prepare, workers=1, depth=2) as ahead:
        for _ in ahead.run(range(4)):
            time.sleep(0.08)  # the "GPU" is slower than preparation: no waiting after the first item
    assert ahead.stats.wait_seconds < 0.05 + 0.03


def test_pipeline_refuses_bad_sizes():
    with pytest.raises(ValueError):
        AheadPipeline(lambda x: x, workers=0)
    with pytest.raises(ValueError):
        AheadPipeline(lambda x: x, depth=0)
