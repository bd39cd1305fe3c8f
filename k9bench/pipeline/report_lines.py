"""The configuration block the launcher prints first (every value, secrets masked)."""

from __future__ import annotations

import sys


def config_lines(launch) -> list[str]:
    """``  MODEL_NAME       Qwen/...`` lines, as run_eval.sh always printed them."""
    from k9bench.pipeline.slurm import job_line

    s, v, mode = launch.s, launch.s.values, launch.mode
    strict = v["DOWNLOAD_STRICT"] == "1"
    published = f" (paper numbers: PUBLISHED={v['PUBLISHED']})" if v["REPORT"] == "1" else ""
    lines = [f"K9-Bench evaluation{' (DEMO)' if s.demo else ''}",
             f"  slurm job        {job_line(launch.env)}",
             f"  repository       {launch.repo}",
             f"  python           {sys.executable} ({sys.version.split()[0]})",
             f"  MODEL_NAME       {v['MODEL_NAME']}",
             f"  MAX_FRAMES       {v['MAX_FRAMES']}",
             f"  MAX_SAMPLES      {v['MAX_SAMPLES']}",
             f"  DATASET_NAME     {v['DATASET_NAME']} (split {v['SPLIT']})",
             f"  VIDEO_DIR        {v['VIDEO_DIR']}",
             f"  OUT_DIR          {v['OUT_DIR']}",
             f"  BATCH_SIZE       {v['BATCH_SIZE']} (embedding: {v['EMBED_BATCH_SIZE']})",
             f"  DTYPE            {v['DTYPE'] or 'eval_video_llm.py default (bf16 on GPU, float32 on CPU)'}",
             f"  ATTN_IMPL        {v['ATTN_IMPL'] or 'eval_video_llm.py default (flash_attention_2 on GPU when installed)'}",
             f"  THINKING_MODE    {int(s.thinking)}" + (f" (limit: {v['THINKING_LIMIT']})" if s.thinking else ""),
             f"  AUDIO            {v['AUDIO']}{' (the model hears the soundtracks; artifacts tagged _av)' if s.audio else ''}",
             f"  EMBEDDING_MODEL  {v['EMBEDDING_MODEL']}",
             f"  DEVICE           {v['DEVICE']}",
             f"  THRESHOLD        {v['THRESHOLD']}",
             f"  DOWNLOAD_STRICT  {v['DOWNLOAD_STRICT']} "
             f"({'a failed download stops the run' if strict else 'failed downloads become failed records, counted as wrong'})",
             f"  REPORT           {v['REPORT']}{published}"]
    shards = f"  shards           {mode.num_shards}"
    if mode.shard_id is not None:
        shards += f" (this run: shard {mode.shard_id})"
    if mode.finalize:
        shards += " (finalize: merge + scoring)"
    lines.append(shards)
    from k9bench.pipeline.registry import STAGES

    lines += [f"  {e.name:<17}{e.config_line(s)}" for e in STAGES if e.config_line is not None]  # the judge: on or off
    if v["SERVE"]:
        lines.append(f"  SERVE            vllm (tensor parallel {v['TENSOR_PARALLEL'] or v['GPUS'] or 1}); inference through --backend openai")
    elif v["SERVE_URL"]:
        lines.append(f"  SERVE_URL        {v['SERVE_URL']} (inference through --backend openai)")
    if v["GPUS"] or v["GPUS_PER_NODE"]:
        lines.append(f"  GPUS             {v['GPUS'] or '-'} (per node: {v['GPUS_PER_NODE'] or '-'})")
    layout = launch.layout
    lines.append(f"  artifacts        {layout.path('raw')} -> {layout.path('sim')} -> {layout.path('eval')}")
    extra = {name: " ".join(args) for name, args in s.extra.items() if args}
    if extra:
        from k9bench.redact import redact_argv

        shown = " ".join(f"{name.split('_')[0].lower()}: '{' '.join(redact_argv(list(s.extra[name])))}'" for name in extra)
        lines.append(f"  extra args       {shown}")
    return lines


class StepOutput:
    """A stdout for one stage: each line it prints is prefixed ``[<step>] `` so that every line of the launcher's
    log says where it comes from (the launcher's own ``[run_eval ...]`` lines pass unchanged)."""

    def __init__(self, step: str, target):
        self.prefix, self.target, self._pending = f"[{step}] ", target, ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self.target.write((line if line.startswith("[run_eval ") else self.prefix + line) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.write("\n")
        self.target.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str):  # encoding, fileno...: the real stream's
        return getattr(self.target, name)


def step_output(step: str):
    """``with step_output("evaluate"):`` the stage's stdout lines carry its name."""
    import contextlib

    @contextlib.contextmanager
    def block():
        out = StepOutput(step, sys.stdout)
        with contextlib.redirect_stdout(out):
            try:
                yield
            finally:
                out.flush()

    return block()
