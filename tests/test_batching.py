"""Batch planning across videos, the --batch_size auto rule and the look-ahead preparation pool."""

from __future__ import annotations

import threading
import time

import pytest

from k9bench.inference.batching import (
    DEFAULT_MAX_AUTO_BATCH,
    MemoryModel,
    auto_batch_size,
    estimate_video_tokens,
    given_batch_size,
    halve_batch_size,
    kv_bytes_per_token,
    memory_model_for,
    parse_batch_size,
    plan_batches,
    video_order,
)
from k9bench.inference.pipeline import AheadPipeline


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


def test_costs_order_videos_longest_first_inside_windows():
    costs = [100, 300, None, 200, 50, 400]
    assert video_order(costs) == [5, 1, 3, 0, 4, 2]
    assert video_order(costs, window=3) == [1, 0, 2, 5, 3, 4]
    batches = plan_batches([1, 1, 1, 1, 1, 1], 2, costs=costs, window=3)
    assert flatten(batches) == [(1, 0), (0, 0), (2, 0), (5, 0), (3, 0), (4, 0)]


def padding_waste(batches, costs) -> float:
    """Share of prompt positions that are padding when each row is padded to its batch's longest video."""
    total = padded = 0.0
    for b in batches:
        longest = max(costs[p.group] for p in b.parts)
        for p in b.parts:
            total += costs[p.group] * p.size
            padded += longest * p.size
    return 0.0 if padded == 0 else (padded - total) / padded


def test_ordering_by_length_lowers_padding():
    costs = [3000, 800, 2900, 900, 3100, 700, 850, 2950]
    sizes = [5] * len(costs)
    plain = padding_waste(plan_batches(sizes, 10), costs)
    ordered = padding_waste(plan_batches(sizes, 10, costs=costs), costs)
    assert ordered < plain / 4


@pytest.mark.parametrize("bad", [dict(sizes=[1], batch_size=0), dict(sizes=[-1], batch_size=2),
                                 dict(sizes=[1, 2], batch_size=2, costs=[1.0])])
def test_bad_plans_are_refused(bad):
    with pytest.raises(ValueError):
        plan_batches(bad.pop("sizes"), bad.pop("batch_size"), **bad)


def test_video_tokens_estimate():
    # 32 frames of 336x392 at patch 16: 16 temporal pairs x (21 x 24 patches / 4)
    assert estimate_video_tokens(32, 336, 392, 16) == 16 * (21 * 24 // 4)
    assert estimate_video_tokens(5, 64, 64, 16, text_tokens=10) == 3 * 4 + 10


# --------------------------------------------------------------------------- --batch_size auto


def test_batch_size_values():
    assert [parse_batch_size(v) for v in ("8", " 1 ", "auto", "AUTO", 3)] == [8, 1, "auto", "auto", 3]
    for bad in ("0", "-2", "eight", "1.5", ""):
        with pytest.raises(ValueError):
            parse_batch_size(bad)


def test_auto_is_1_on_cpu():
    choice = auto_batch_size(None, None, device="cpu")
    assert choice.batch_size == 1 and "CPU" in choice.reason and choice.to_dict()["history"] == [[1, "chosen"]]


def test_auto_fits_free_memory_and_halves_on_out_of_memory():
    mem = MemoryModel(kv_bytes_per_token=147456, prompt_tokens=2800, max_new_tokens=64,
                      batch_overhead_bytes=4 * 2**30, row_overhead_bytes=0)
    choice = auto_batch_size(100 * 2**30, mem, device="cuda", max_batch=1000)
    usable = int(100 * 2**30 * 0.85)
    assert mem.batch_bytes(choice.batch_size) <= usable < mem.batch_bytes(choice.batch_size + 1)
    assert choice.batch_size > 100 and choice.inputs["batch_bytes"] == mem.batch_bytes(choice.batch_size)
    assert auto_batch_size(100 * 2**30, mem, device="cuda", max_batch=64).batch_size == 64  # a cap
    assert auto_batch_size(100 * 2**30, mem, device="cuda", questions=12).batch_size == 12
    assert auto_batch_size(2 * 2**30, mem, device="cuda").batch_size == 1  # never below 1
    c = auto_batch_size(100 * 2**30, mem, device="cuda", max_batch=64)
    assert c.halve() == 32 and c.halve() == 16
    assert c.to_dict()["history"] == [[64, "chosen"], [32, "out of memory"], [16, "out of memory"]]
    assert c.to_dict()["inputs"]["free_bytes"] == 100 * 2**30
    assert [halve_batch_size(n) for n in (1, 2, 3, 8)] == [1, 1, 1, 4]
    g = given_batch_size(8)
    assert g.batch_size == 8 and g.halve() == 4 and g.requested == "8"


def test_auto_counts_each_video_prefix_once_and_the_kept_prefix_caches():
    """The shared-prefix engine's layout: per video its prefix once in the batch cache and once as its kept
    prefix cache (both live while the batch decodes), plus the prefix kept from the previous batch; per
    question its suffix and new tokens. Not a prefix copy per question."""
    kv = 1000
    mem = MemoryModel(kv_bytes_per_token=kv, prompt_tokens=2100, max_new_tokens=64, suffix_tokens=100,
                      questions_per_video=8, kept_prefixes=1, row_overhead_bytes=7, batch_overhead_bytes=5)
    assert mem.prefix_tokens == 2000
    # 32 questions of 8 per video: 4 whole videos, one more when the batch starts inside a video
    assert mem.videos_in(32) == 5 and mem.videos_in(1) == 1
    assert mem.batch_bytes(32) == kv * ((2 * 5 + 1) * 2000 + 32 * (100 + 64)) + 32 * 7 + 5
    no_kept = MemoryModel(kv_bytes_per_token=kv, prompt_tokens=2100, max_new_tokens=64, suffix_tokens=100,
                          questions_per_video=8, kept_prefixes=0, row_overhead_bytes=7, batch_overhead_bytes=5)
    assert mem.batch_bytes(32) - no_kept.batch_bytes(32) == kv * 2000
    # the same memory holds many more questions when each video's prefix serves 8 of them
    one_each = MemoryModel(kv_bytes_per_token=kv, prompt_tokens=2100, max_new_tokens=64, suffix_tokens=100)
    free = 40 * 2**20
    shared = auto_batch_size(free, mem, device="cuda", max_batch=10_000).batch_size
    alone = auto_batch_size(free, one_each, device="cuda", max_batch=10_000).batch_size
    assert shared > 3 * alone
    # the rule's answer is the largest batch whose bytes fit, found over the whole range
    usable = int(free * 0.85)
    assert mem.batch_bytes(shared) <= usable < mem.batch_bytes(shared + 1)
    assert "questions per video" in auto_batch_size(free, mem, device="cuda").reason


def test_the_auto_cap_is_what_memory_allows_up_to_at_least_256():
    assert DEFAULT_MAX_AUTO_BATCH >= 256
    mem = MemoryModel(kv_bytes_per_token=1000, prompt_tokens=2100, max_new_tokens=64, suffix_tokens=100, questions_per_video=8)
    big = auto_batch_size(2**40, mem, device="cuda")
    assert big.batch_size == DEFAULT_MAX_AUTO_BATCH and "capped" in big.reason
    small = auto_batch_size(40 * 2**20, mem, device="cuda")
    assert small.batch_size < DEFAULT_MAX_AUTO_BATCH and "capped" not in small.reason


def test_memory_model_from_a_qwen3_vl_4b_sized_config():
    from types import SimpleNamespace

    text = SimpleNamespace(num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                           hidden_size=2560, intermediate_size=9728, vocab_size=151936)
    mem = memory_model_for(SimpleNamespace(text_config=text), dtype_bytes=2, prompt_tokens=2800, max_new_tokens=64)
    assert mem.kv_bytes_per_token == kv_bytes_per_token(36, 8, 128, 2) == 147456
    # about 0.8 GiB per question row when every question has its own prefix (the generate path)
    assert 0.7 * 2**30 < mem.row_bytes() < 0.9 * 2**30
    alone = auto_batch_size(130 * 2**30, mem, device="cuda").batch_size
    assert 64 < alone < 256
    # with the engine, 6 questions per video share a prefix: an H200's ~130 GiB holds the cap
    shared = memory_model_for(SimpleNamespace(text_config=text), dtype_bytes=2, prompt_tokens=2800, max_new_tokens=64,
                              suffix_tokens=256, questions_per_video=6)
    assert auto_batch_size(130 * 2**30, shared, device="cuda").batch_size == DEFAULT_MAX_AUTO_BATCH


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
