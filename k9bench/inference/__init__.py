"""Video-LLM inference for K9-Bench (the engine behind ``eval_video_llm.py``).

- :mod:`k9bench.inference.settings`      the run's typed settings (one frozen dataclass per concern,
                                         composed into ``RunConfig``; the script's flags are generated
                                         from them; ``python -m k9bench.inference.settings`` lists them)
- :mod:`k9bench.inference.backend`       the backend interface and registry (``--backend``); a backend
                                         is built as ``Cls(config)``
- :mod:`k9bench.inference.hf`            the Hugging Face transformers backend (device, dtype, attention:
                                         :mod:`k9bench.accelerator`)
- :mod:`k9bench.inference.openai_backend` the OpenAI-compatible HTTP backend
- :mod:`k9bench.inference.runner`        the loop: grouping by video, batching, prefetch, checkpoints,
                                         signals, out-of-memory retry, the raw artifact
- :mod:`k9bench.inference.resume_check`  which earlier records a run may reuse (the record fingerprint);
                                         the files themselves are :class:`k9bench.resume.ResumableStage`'s
- :mod:`k9bench.inference.batching`      batches spanning videos (``plan_batches``) and ``--batch_size auto``
- :mod:`k9bench.inference.prefix_cache`  each video's shared prefix prefilled once (Qwen-VL, the HF backend)
- :mod:`k9bench.inference.pipeline`      CPU preparation of the next batches on worker threads
"""
