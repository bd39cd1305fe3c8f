"""The LLM labeller's loop: reuse, the reply store, concurrent requests, the checkpoint, the labels file.

Each wrong answer's request has a content key (:func:`k9bench.judge.cache.request_key`: the labelling
model, the filled prompt, the sampling sent). A label already in the checkpoint or in the earlier
labels file under the same key is reused; a reply in the store (:class:`k9bench.judge.cache.ReplyStore`)
is read, not bought; only the rest are sent, ``--concurrency`` at a time
(:func:`k9bench.serving.openai_api.run_concurrent`), each result checkpointed as it comes. The labels
file is then written atomically and the checkpoint removed.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from k9bench.artifact_io import ArtifactError, CheckpointLog, read_json, write_json_atomic
from k9bench.artifacts import now_iso
from k9bench.judge.cache import ReplyStore, default_store_folder, endpoint_id, request_key
from k9bench.layout import checkpoint_path
from k9bench.people import LABELS
from k9bench.people.labels import labels_document, stratified_sample, wrong_answers
from k9bench.stage import deferred, file_digest

log = logging.getLogger("k9bench.people")

PROMPT = """You are checking why a video question-answering model got a question about a dog video wrong.

Question: {question}
Options:
{options}
Right option: {correct}
The model's full response:
<<<
{response}
>>>

Pick the one failure type that best explains the wrong answer:
{types}

Reply with one JSON object and nothing after it: {{"label": "<one of: {keys}>", "reason": "<one sentence>"}}"""
"""The labeller's prompt (our own words); its SHA-256 is part of the fingerprint."""

LLM_PREFIX = "llm-"


def labeller_name(model: str) -> str:
    from k9bench.layout import short_model_name

    return LLM_PREFIX + short_model_name(model)


def render(record) -> str:
    """The filled prompt of one wrong answer."""
    types = "\n".join(f"- {key}: {text}" for key, text in LABELS.items() if key != "other")
    keys = ", ".join(k for k in LABELS if k != "other")
    return PROMPT.format(question=record.question, options="\n".join(record.options or []), correct=record.ground_truth,
                         response=record.response, types=types, keys=keys)


def parse_label(text: str) -> tuple[str, str]:
    """``(label, reason)`` from a reply: the last JSON object holding a known ``label``; ValueError otherwise."""
    from k9bench.answers import iter_brace_blocks

    found = None
    for block in iter_brace_blocks(text or ""):
        try:
            obj = json.loads(block)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("label") in LABELS:
            found = obj
    if found is None:
        raise ValueError("no JSON object with a known \"label\" in the reply")
    return found["label"], str(found.get("reason") or "")




def _earlier(output: Path) -> dict:
    """idx -> label row of the earlier labels file (empty when there is none or it cannot be read)."""
    if not output.is_file():
        return {}
    try:
        data = read_json(output)
    except ArtifactError as exc:
        log.warning("%s: unreadable (%s); labelling afresh", output, exc)
        return {}
    rows = data.get("labels") if isinstance(data, dict) else None
    return {r["idx"]: r for r in rows or [] if isinstance(r, dict) and isinstance(r.get("idx"), int)}


def _row(record: Any, label: str, reason: str, key: str, model: str | None, usage: dict | None, from_store: bool) -> dict:
    return {"idx": record.idx, "label": label, "note": reason, "question_category": record.question_category,
            "request_sha256": key, "served_model": model, "usage": usage, "from_reply_store": from_store, "timestamp": now_iso()}


def label_all(stage: Any, records: list, api_key: str) -> dict:
    """Label every sampled wrong answer not labelled before; write and return the labels file's content."""
    from k9bench.judge.stage import probe
    from k9bench.serving.openai_api import ChatClient, run_concurrent

    cfg = stage.config
    s, r = cfg.labeller, cfg.requests
    output = stage.outputs()[0]
    wrong = wrong_answers(records)
    chosen = sorted(stratified_sample(wrong, cfg.run.sample, cfg.run.seed), key=lambda rec: rec.idx)
    params = s.request_params()
    keys = {rec.idx: request_key(judge_model=s.labeller_model, prompt=render(rec), params=params) for rec in chosen}
    ckpt = CheckpointLog(checkpoint_path(output))
    prior = {**_earlier(output), **ckpt.load()}
    done = {i: row for i, row in prior.items() if i in keys and row.get("request_sha256") == keys[i] and "label" in row}
    todo = [rec for rec in chosen if rec.idx not in done]
    store = None if r.no_cache else ReplyStore(default_store_folder(output))
    skipped: dict[int, dict] = {}
    sent = from_store = 0
    log.info("%d wrong answer(s) of %d record(s); %d to label, %d labelled before (same request)", len(chosen), len(records), len(todo),
             len(chosen) - len(todo))

    def take(rec, row: dict | None, error: str | None) -> None:
        if row is not None:
            with deferred():
                ckpt.append(row)
            done[rec.idx] = row
        else:
            skipped[rec.idx] = {"idx": rec.idx, "error": error}

    rest = []
    for rec in todo:
        cached = store.get(keys[rec.idx]) if store is not None else None
        if cached is None:
            rest.append(rec)
            continue
        try:
            label, reason = parse_label(cached.text)
        except ValueError:
            rest.append(rec)
            continue
        from_store += 1
        take(rec, _row(rec, label, reason, keys[rec.idx], cached.model, cached.usage, True), None)
    if rest:
        client = ChatClient(api_key=api_key, base_url=r.base_url, timeout=r.timeout, retry=r.retry_policy())
        probe(client, r.base_url, api_key)

        def ask(rec):
            return client.chat([{"role": "user", "content": render(rec)}], model=s.labeller_model, label=f"idx {rec.idx}", **params)

        results = run_concurrent(ask, rest, r.concurrency)
        try:
            for rec, result in results:
                sent += 1
                if not result.ok:
                    take(rec, None, f"call failed ({result.error_kind}): {result.error}")
                    continue
                try:
                    label, reason = parse_label(result.text or "")
                except ValueError as exc:
                    take(rec, None, f"{exc}: {(result.text or '')[:300]!r}")
                    continue
                usage = result.usage.to_dict()
                take(rec, _row(rec, label, reason, keys[rec.idx], result.model, usage, False), None)
                if store is not None:
                    store.put(keys[rec.idx], text=result.text or "", model=result.model, finish_reason=result.finish_reason,
                              usage=usage, attempts=result.attempts,
                              request={"labeller_model": s.labeller_model, "endpoint": endpoint_id(r.base_url), "params": params})
        finally:
            results.close()
            ckpt.close()
    sample = {"size": cfg.run.sample, "seed": cfg.run.seed, "wrong_answers": len(wrong), "idx": [rec.idx for rec in chosen],
              "stratified_by": "question_category"}
    run_info = {"to_label": len(todo), "reused": len(chosen) - len(todo), "from_store": from_store, "sent_this_run": sent,
                "reply_store": None if store is None else str(store.folder)}
    doc = labels_document([done[i] for i in sorted(done)], labeller=labeller_name(s.labeller_model), kind="llm", model=stage.model,
                          eval_file=str(cfg.run.evaluations), eval_sha256=file_digest(cfg.run.evaluations), sample=sample,
                          extra={"labeller_model": s.labeller_model, "sent_params": params, "stage": stage.stage_block(),
                                 "run": run_info, "skipped": [skipped[i] for i in sorted(skipped)]}, stage=stage.name)
    with deferred():
        write_json_atomic(output, doc)
        if not skipped:
            ckpt.remove()
    return doc
