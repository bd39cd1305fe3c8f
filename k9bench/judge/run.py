"""A resumable judge run: what earlier runs left, the request loop, the final files.

Each result is appended to ``<output>.partial.jsonl`` as it arrives (inside
:func:`k9bench.stage.deferred`, so a stop signal never tears a line). The final files are written
at the end: the skipped list, the summary, the meta sidecar (with the stage block) and the judge
list last, then the checkpoint goes. A rerun keeps what is scored, retries what was skipped and
sends only the rest. An earlier entry is reused when its request is the task's (its key,
:mod:`k9bench.judge.cache`), whatever evaluations file it came from; the changed ones are sent again
and the earlier final files are set aside (``<name>.replaced-<time>``) before the new ones are
written. A request paid before under any output name is scored from the store of paid replies
(``--no_cache``: not). Earlier files made with another fingerprint (:func:`judge_fingerprint`) are
refused (``on_change='refuse'``, the script's rule) or set aside (``'redo'``). A stop signal (:class:`k9bench.stage.Interrupted`) stops new requests, abandons those in
flight and leaves the checkpoint for the rerun; no final file is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from k9bench.artifacts import JudgeEntry, SkippedEntry, now_iso
from k9bench.artifact_io import ArtifactError, CheckpointLog, read_json, write_json_atomic
from k9bench.headers.files import read_header, stamped
from k9bench.judge.parse import AXES, JudgeParseError, stored_score
from k9bench.judge.cache import ReplyStore, default_store_folder, endpoint_id
from k9bench.judge.score import Outcome, judge_task, outcome_from_reply, summarize, task_key
from k9bench.judge.settings import MISSING_MODEL_ANSWER, JudgeConfig, JudgeInputError, RunPaths, judge_fingerprint
from k9bench.judge.tasks import TaskSet
from k9bench.redact import redact
from k9bench.settings import fingerprint_differences
from k9bench.stage import deferred

log = logging.getLogger("k9bench.judge")

__all__ = ["PriorState", "RunResult", "load_prior", "missing_answer_entry", "read_meta", "run_judge", "unreachable_after"]


# ---------------------------------------------------------------------------
# What earlier runs left


@dataclass
class PriorState:
    """What earlier runs of the same command left."""

    entries: dict = field(default_factory=dict)
    """idx -> entry dict (from the output file and the checkpoint)."""
    skipped: dict = field(default_factory=dict)
    """idx -> skipped dict (from the skipped file and the checkpoint)."""
    checkpoint_rejected: int = 0
    """Complete checkpoint lines that were not records (:attr:`CheckpointLog.rejected`), moved aside."""
    checkpoint_torn: int = 0
    """1 when the checkpoint's final line was torn by a kill and dropped (:attr:`CheckpointLog.torn`)."""
    rejected_path: str | None = None
    """Where the rejected lines went (set when there were any)."""
    in_output: dict = field(default_factory=dict)
    """idx -> scored entry of the earlier final output file (set aside when one of them judged a request that changed)."""


class _Mismatch(Exception):
    """Earlier files that this run must not mix with its own (refused or set aside by the caller)."""


def _load_list(path: Path, what: str) -> list[dict]:
    try:
        data = read_json(path)
    except ArtifactError as exc:
        raise JudgeInputError(f"{exc} (the {what} of an earlier run; move it away to start afresh)") from None
    if not isinstance(data, list) or not all(isinstance(x, dict) and "idx" in x for x in data):
        raise JudgeInputError(f"{path}: not a list of entries with 'idx' (the {what} of an earlier run; move it away to start afresh)")
    return data


def _legacy_fingerprint(judge_model: Any, prompt_sha256: Any) -> dict:
    """The fingerprint of a file written before fingerprints were recorded (model and prompt only)."""
    return {k: v for k, v in (("judge_model", judge_model), ("prompt_sha256", prompt_sha256)) if v is not None}


def _record_fingerprint(record: dict) -> dict:
    prior = record.get("fingerprint")
    return prior if isinstance(prior, dict) else _legacy_fingerprint(record.get("judge_model"), record.get("prompt_sha256"))


def read_meta(paths: RunPaths) -> dict | None:
    """The meta sidecar of an earlier final output (None when there is none)."""
    if not paths.meta.exists():
        return None
    try:
        meta = read_json(paths.meta)
        read_header(meta, kind="judge", path=paths.meta)  # a header newer than this code reads: refused, naming it
    except ArtifactError as exc:
        raise JudgeInputError(f"{exc} (the meta sidecar of an earlier run; move it away to start afresh)") from None
    return meta if isinstance(meta, dict) else {}


def meta_input_digest(meta: dict | None) -> str | None:
    """The sha256 of the evaluations file an earlier final output was made from, as its sidecar records it."""
    if not meta:
        return None
    block = meta.get("stage") if isinstance(meta.get("stage"), dict) else {}
    digests = [d for d in (block.get("inputs") or {}).values() if isinstance(d, str)]
    if digests:
        return digests[0]
    legacy = meta.get("input") if isinstance(meta.get("input"), dict) else {}
    return legacy.get("sha256") if isinstance(legacy.get("sha256"), str) else None


def _final_records(paths: RunPaths, meta: dict | None) -> list[dict]:
    """An earlier run's final files as checkpoint-shaped records (skipped first, so a scored entry of the
    same idx wins), each with the fingerprint and input digest its meta sidecar records."""
    if meta is None and paths.output.exists():
        log.warning("%s has no %s sidecar: cannot confirm its entries used this prompt; keeping them", paths.output, paths.meta.name)
    judge = (meta or {}).get("judge") if isinstance((meta or {}).get("judge"), dict) else {}
    fingerprint = judge.get("fingerprint")
    if not isinstance(fingerprint, dict):
        fingerprint = _legacy_fingerprint(judge.get("model"), judge.get("prompt_sha256"))
    common = {"fingerprint": fingerprint, "input_sha256": meta_input_digest(meta)}
    records = []
    if paths.skipped.exists():
        for s in _load_list(paths.skipped, "skipped list"):
            records.append({"idx": s["idx"], **common, "status": "skipped", "skipped": s, "source": str(paths.skipped)})
    if not paths.output.exists():
        return records
    for n, e in enumerate(_load_list(paths.output, "output")):
        try:
            JudgeEntry.from_dict(e, where=f"{paths.output}: entry #{n}")
            scores = e.get("scores")
            if not isinstance(scores, dict):
                raise JudgeParseError("scores is not a dictionary")
            for axis in AXES:
                if axis not in scores:
                    raise JudgeParseError(f"score {axis!r} is missing")
                stored_score(axis, scores[axis])
        except ArtifactError as exc:
            raise JudgeInputError(f"{exc}; fix or move the file away") from None
        except JudgeParseError as exc:
            raise JudgeInputError(f"{paths.output}: idx {e['idx']}: {exc}; fix or move the file away") from None
        records.append({"idx": e["idx"], **common, "status": "scored", "entry": e, "source": str(paths.output)})
    return records


def load_prior(paths: RunPaths, fingerprint: dict, *, on_change: str = "refuse") -> PriorState:
    """Read the output, skipped file and checkpoint of earlier runs. Entries made with another
    fingerprint (model, temperature, prompt, score rule) are refused (:class:`JudgeInputError`) or,
    with ``on_change='redo'``, set aside: the old checkpoint is removed and the run starts afresh (its
    final files replace the old ones). Which of the entries kept are reused is decided per entry by
    its request (:func:`reusable`), not by the evaluations file they were made from."""
    try:
        state = _prior(paths, fingerprint)
    except _Mismatch as exc:
        if on_change != "redo":
            raise JudgeInputError(str(exc)) from None
        log.warning("%s; judging afresh (the old results are replaced at the end of this run)", exc)
        CheckpointLog(paths.checkpoint).remove()
        return PriorState()
    return state


def _prior(paths: RunPaths, fingerprint: dict) -> PriorState:
    ckpt = CheckpointLog(paths.checkpoint)
    records: dict = {}
    finals = _final_records(paths, read_meta(paths))
    for rec in finals:
        records[rec["idx"]] = rec
    try:
        records.update(ckpt.load())
    except ArtifactError as exc:
        raise JudgeInputError(f"{exc} (the checkpoint of an earlier run; move it away to start over)") from None
    state = PriorState(checkpoint_rejected=ckpt.rejected, checkpoint_torn=ckpt.torn,
                       rejected_path=str(ckpt.rejected_path) if ckpt.rejected else None,
                       in_output={r["idx"]: r["entry"] for r in finals if r["status"] == "scored"})
    for idx in sorted(records, key=str):
        rec = records[idx]
        where = rec.get("source") or str(paths.checkpoint)
        diffs = fingerprint_differences(_record_fingerprint(rec), fingerprint, partial=True)
        if diffs:
            prior = _record_fingerprint(rec)
            made = f"judge model {prior.get('judge_model')!r}" if "judge_model" in prior else "other settings"
            raise _Mismatch(f"{where}: idx {idx} was judged with {made} and settings that differ from this run's "
                            f"({'; '.join(diffs)}); use another --output, or delete the old files to rejudge")
        if rec.get("status") == "scored":
            state.entries[idx] = rec["entry"]
        elif rec.get("status") == "skipped":
            state.skipped[idx] = rec["skipped"]
    model = fingerprint.get("judge_model")
    for idx, e in state.entries.items():
        if e.get("judge_model") != model:
            raise _Mismatch(f"{paths.output}: idx {idx} was judged by {e.get('judge_model')!r}, not {model!r}; use another --output")
    return state


def reusable(entry: dict, task: Any, key: str) -> bool:
    """Whether an earlier scored entry answers this task's request: its recorded request key is the
    task's; an entry written before keys were recorded is matched by its question, right option and
    answer (its fingerprint, checked by :func:`load_prior`, holds the model, prompt and temperature)."""
    recorded = entry.get("request_sha256")
    if isinstance(recorded, str):
        return recorded == key
    return (entry.get("question"), entry.get("correct_answer"), entry.get("model_output")) == (
        task.question, task.correct_answer, task.model_output)


def set_aside(paths: RunPaths) -> list[tuple[Path, Path]]:
    """Move an earlier run's final files aside (renamed ``<name>.replaced-<time>``, never deleted), as
    the inference stage does with an earlier raw file."""
    import time

    stamp = time.strftime("%Y%m%dT%H%M%S")
    moved = []
    for path in (paths.output, paths.skipped, paths.meta, paths.summary):
        if path.exists():
            aside = path.with_name(f"{path.name}.replaced-{stamp}")
            path.rename(aside)
            moved.append((path, aside))
    return moved


# ---------------------------------------------------------------------------
# The run


@dataclass
class RunResult:
    """What :func:`run_judge` did."""

    entries: list[dict]
    """Final judge list, idx order."""
    skipped: list[dict]
    """Final skipped list, idx order (``missing_model_answer`` entries included)."""
    summary: dict
    """The saved summary."""
    judged_now: int
    """Requests resolved this run (scored + skipped)."""
    unreachable: str | None = None
    """Set (the reason) when the run stopped because the endpoint refused every connection (see
    :func:`unreachable_after`); the checkpoint holds what was done, no final file is written."""

    @property
    def retryable_skipped(self) -> list[dict]:
        """Skipped entries a rerun may still score (all but the questions with no answer to judge)."""
        return [s for s in self.skipped if s.get("kind") != MISSING_MODEL_ANSWER]


def unreachable_after(concurrency: int) -> int:
    """Consecutive results that failed to connect (after their retries) that stop a run: the endpoint went
    down, and going on would spend hours in retry backoff for nothing."""
    return max(10, 3 * concurrency)


def missing_answer_entry(idx: int, dataset: str | None) -> dict:
    """The skipped entry of a dataset question with no record in the judged file."""
    return SkippedEntry(idx=idx, error=MISSING_MODEL_ANSWER, timestamp=now_iso(),
                        extra={"kind": MISSING_MODEL_ANSWER,
                               "detail": f"question {idx} of {dataset or 'the dataset'} has no record in the judged file"}).to_dict()


@dataclass
class _Tally:
    """What this run did so far."""

    scored: int = 0
    skipped: int = 0
    refused_streak: int = 0
    served: dict = field(default_factory=dict)
    usage: Any = None
    from_store: int = 0
    """Entries scored from the reply store (nothing paid)."""
    sent: int = 0
    """Requests whose result arrived this run."""


class _Heartbeat:
    """Progress lines while no result arrives: every ``progress.interval`` seconds a thread asks the
    :class:`k9bench.progress.ProgressLog` for its line (``update(0)``), so a batch log hears from the judge
    at least that often even when every request is waiting on retries; updates are serialised."""

    def __init__(self, progress: Any):
        import threading

        self.progress = progress
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="k9bench-judge-progress", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.progress.interval):
            with self._lock:
                self.progress.update(0)

    def update(self, n: int, *, failed: int = 0) -> None:
        with self._lock:
            self.progress.update(n, failed=failed)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self.progress.close()


def _take(outcome: Outcome, task: Any, record: dict, ckpt: CheckpointLog, entries: dict, skipped: dict, tally: _Tally) -> None:
    """Checkpoint one result and fold it into the run's state (called inside ``deferred()``)."""
    from k9bench.serving.openai_api import Usage

    if outcome.entry is not None:
        data = outcome.entry.to_dict()
        ckpt.append({**record, "status": "scored", "entry": data})
        entries[task.idx] = data
        skipped.pop(task.idx, None)
        tally.scored += 1
        name = data.get("judge_model_served") or "?"
        tally.served[name] = tally.served.get(name, 0) + 1
        if not outcome.from_store:  # a stored reply was paid by an earlier run
            tally.usage = tally.usage + Usage.from_dict(data.get("judge_usage"))
        tally.refused_streak = 0
    else:
        data = outcome.skipped.to_dict()
        ckpt.append({**record, "status": "skipped", "skipped": data})
        skipped[task.idx] = data
        tally.skipped += 1
        tally.usage = tally.usage + Usage.from_dict(data.get("judge_usage"))
        tally.refused_streak = tally.refused_streak + 1 if outcome.skipped.extra.get("error_kind") == "connection" else 0


def _from_store(todo: list, store: ReplyStore, keys: dict, settings: Any, paths: RunPaths, record_base: dict, entries: dict,
                skipped: dict, tally: _Tally) -> list:
    """Score from the reply store every task whose request was paid before (checkpointed as any result);
    returns the tasks still to send. A stored reply that no longer scores (``--strict_scores``) is sent again."""
    rest = []
    with CheckpointLog(paths.checkpoint) as ckpt:
        for task in todo:
            reply = store.get(keys[task.idx])
            outcome = None if reply is None else outcome_from_reply(
                task, settings, text=reply.text, model=reply.model, finish_reason=reply.finish_reason, usage=reply.usage,
                attempts=reply.attempts, key=keys[task.idx], from_store=True)
            if outcome is None or outcome.entry is None:
                rest.append(task)
                continue
            with deferred():
                _take(outcome, task, {"idx": task.idx, **record_base}, ckpt, entries, skipped, tally)
            tally.scored -= 1
            tally.from_store += 1
    if tally.from_store:
        log.info("%d entr%s scored from the reply store %s (paid by an earlier run; not sent)", tally.from_store,
                 "y" if tally.from_store == 1 else "ies", store.folder)
    return rest


def run_judge(config: JudgeConfig, *, taskset: TaskSet, paths: RunPaths, make_client: Callable[[], Any],
              meta: dict | None = None, input_sha256: str | None = None, stage_block: dict | None = None,
              before_first_request: Callable[[Any], None] | None = None) -> RunResult:
    """Judge every task not already done; checkpoint each result; write skipped, summary, meta and output.

    ``make_client`` is called only when there is something to judge and returns an object with
    ``chat(messages, model=..., label=..., **params) -> ChatResult`` (:class:`k9bench.serving.openai_api.ChatClient`);
    ``before_first_request(client)`` (the endpoint probe) runs before the first request. Everything
    written passes through :func:`k9bench.redact.redact` where it holds settings or error texts."""
    from k9bench.artifact_io import remove_stale_temps
    from k9bench.serving.openai_api import Usage, run_concurrent
    from k9bench.progress import ProgressLog

    settings = config.judge
    limit = config.run.limit
    fingerprint = judge_fingerprint(settings)
    targets = taskset.tasks[:limit] if limit is not None and limit >= 0 else list(taskset.tasks)
    prior = load_prior(paths, fingerprint, on_change=config.run.on_change)
    stale = [tmp for path in (paths.output, paths.skipped, paths.summary, paths.meta) for tmp in remove_stale_temps(path)]
    if stale:  # this run holds the output's lock: a temporary file beside its outputs is a killed run's
        log.info("removed %d temporary file(s) a killed run left: %s", len(stale), ", ".join(str(t) for t in stale))
    endpoint = endpoint_id(config.requests.base_url)
    keys = {t.idx: task_key(t, settings) for t in taskset.tasks}
    tasks_by_idx = {t.idx: t for t in taskset.tasks}
    changed = sorted((i for i, e in prior.entries.items() if i not in tasks_by_idx or not reusable(e, tasks_by_idx[i], keys[i])), key=str)
    for idx in changed:
        prior.entries.pop(idx)
    if changed:
        shown = ", ".join(str(i) for i in changed[:20])
        log.info("%d earlier entr%s judged another request (its answer, question or right option changed) and %s sent again: idx %s%s",
                 len(changed), "y" if len(changed) == 1 else "ies", "is" if len(changed) == 1 else "are", shown, " ..." if len(changed) > 20 else "")
    replaced = [i for i, e in prior.in_output.items() if i not in tasks_by_idx or not reusable(e, tasks_by_idx[i], keys[i])]
    todo = [t for t in targets if t.idx not in prior.entries]
    reused = len(targets) - len(todo)
    beyond = f", {len(taskset.tasks) - len(targets)} beyond --limit" if len(targets) < len(taskset.tasks) else ""
    log.info("%d record(s): %d to judge, %d already scored (same request: reused), %d failed at inference (not judged)%s",
             taskset.total_records, len(todo), reused, len(taskset.failed), beyond)
    retrying = sum(1 for t in todo if t.idx in prior.skipped)
    if retrying:
        log.info("retrying %d previously skipped entr%s", retrying, "y" if retrying == 1 else "ies")
    if taskset.failed:
        shown = ", ".join(str(f["idx"]) for f in taskset.failed[:20])
        log.warning("%d record(s) failed at inference and are not judged: idx %s%s", len(taskset.failed), shown,
                    " ..." if len(taskset.failed) > 20 else "")
    entries, skipped = dict(prior.entries), dict(prior.skipped)
    if taskset.missing:
        shown = ", ".join(str(i) for i in taskset.missing[:20])
        log.warning("%d question(s) of %s have no record in %s: skipped as %s (idx %s%s)", len(taskset.missing),
                    config.run.dataset_name, config.run.evaluations, MISSING_MODEL_ANSWER, shown, " ..." if len(taskset.missing) > 20 else "")
        for idx in taskset.missing:
            if idx not in entries:
                skipped[idx] = missing_answer_entry(idx, config.run.dataset_name)
    tally = _Tally(usage=Usage())
    unreachable: str | None = None
    stop_after = unreachable_after(config.requests.concurrency)
    client = None
    record_base = {"fingerprint": fingerprint, "input_sha256": input_sha256}
    store = None if config.requests.no_cache else ReplyStore(default_store_folder(paths.output))
    planned = len(todo)
    if store is not None and todo:
        todo = _from_store(todo, store, keys, settings, paths, record_base, entries, skipped, tally)
    if todo:
        client = make_client()
        if before_first_request is not None:
            before_first_request(client)
        ckpt = CheckpointLog(paths.checkpoint)
        progress = ProgressLog("judge", len(todo), unit="questions")
        heartbeat = _Heartbeat(progress)
        results = run_concurrent(lambda t: judge_task(t, client, settings, keys[t.idx]), todo, config.requests.concurrency)
        try:
            for task, outcome in results:
                tally.sent += 1
                if store is not None and outcome.entry is not None:  # the paid reply before the record: never paid twice
                    store.put(keys[task.idx], text=outcome.reply or "", model=outcome.entry.extra.get("judge_model_served"),
                              finish_reason=outcome.finish_reason, usage=outcome.entry.extra.get("judge_usage"),
                              attempts=outcome.entry.extra.get("judge_attempts") or 1,
                              request={"judge_model": settings.judge_model, "endpoint": endpoint, "params": settings.request_params()})
                with deferred():  # a stop signal waits until the line is whole
                    _take(outcome, task, {"idx": task.idx, **record_base}, ckpt, entries, skipped, tally)
                heartbeat.update(1, failed=0 if outcome.entry is not None else 1)
                if tally.refused_streak >= stop_after:
                    unreachable = redact(
                        f"the judge endpoint {getattr(client, 'base_url', '?')} could not be reached for {tally.refused_streak} "
                        "entries in a row (each after its retries): check --base_url and that the server is up")
                    log.error("%s; stopping. %d result(s) of this run are checkpointed in %s; rerun the same command to finish",
                              unreachable, tally.scored + tally.skipped, paths.checkpoint)
                    break
        except BaseException:  # a stop signal (k9bench.stage.Interrupted), Ctrl-C, a bug: the checkpoint stays
            log.warning("%d result(s) of this run are checkpointed in %s; requests in flight are abandoned; rerun the same "
                        "command to send only the unfinished entries", tally.scored + tally.skipped, paths.checkpoint)
            raise
        finally:
            results.close()  # no new request starts; calls in flight are abandoned (daemon threads)
            heartbeat.close()
            ckpt.close()
    final_entries = [entries[i] for i in sorted(entries)]
    final_skipped = [skipped[i] for i in sorted(skipped) if i not in entries]
    run_info = {
        "judge_model": settings.judge_model,
        "to_judge_this_run": planned,
        "reused_entries": reused,
        "reused_from_store": tally.from_store,
        "sent_this_run": tally.sent,
        "changed_entries": len(changed),
        "reply_store": None if store is None else str(store.folder),
        "scored_this_run": tally.scored,
        "skipped_this_run": tally.skipped,
        "retries_this_run": getattr(client, "retries_done", 0) if client is not None else 0,
        "served_models_this_run": tally.served,
        "targets": len(targets),
        "records": taskset.total_records,
        "missing_model_answer": len(taskset.missing),
        "unreachable": unreachable,
        "checkpoint_rejected_lines": prior.checkpoint_rejected,
        "checkpoint_torn_lines": prior.checkpoint_torn,
    }
    if prior.rejected_path:
        run_info["checkpoint_rejected_file"] = prior.rejected_path
    summary = summarize(final_entries, final_skipped, taskset.failed, usage_this_run=tally.usage.to_dict(), extra=run_info)
    if unreachable:  # the checkpoint holds everything; the final files are the rerun's
        return RunResult(final_entries, final_skipped, summary, tally.scored + tally.skipped, unreachable=unreachable)
    meta_out = dict(meta or {})
    judge_block = dict(meta_out.get("judge") or {})
    judge_block.update(config.requests.record())
    judge_block.update(settings.record())
    judge_block.update({"model": settings.judge_model, "fingerprint": fingerprint, "sent_params": settings.request_params()})
    if client is not None:
        judge_block["base_url_used"] = getattr(client, "base_url", None)
    meta_out.update({"judge": judge_block, "run": run_info, "counts": summary["counts"], "failed_at_inference": taskset.failed})
    if stage_block is not None:
        meta_out["stage"] = stage_block
    with deferred():  # the final files as one step: a stop signal waits until they are all written
        if replaced:  # the earlier output held judgements of requests that changed: kept aside, never overwritten
            moved = set_aside(paths)
            log.warning("%s held %d entr%s of requests that changed: the earlier files are kept as %s", paths.output, len(replaced),
                        "y" if len(replaced) == 1 else "ies", ", ".join(str(new) for _, new in moved))
        write_json_atomic(paths.skipped, final_skipped)
        write_json_atomic(paths.summary, redact(summary))
        write_json_atomic(paths.meta, redact(stamped("judge", "judge", meta_out)))
        write_json_atomic(paths.output, final_entries)  # the output last, then the checkpoint goes
        CheckpointLog(paths.checkpoint).remove()
    return RunResult(final_entries, final_skipped, summary, tally.scored + tally.skipped)
