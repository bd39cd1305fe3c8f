"""Video-LLM inference for K9-Bench (the engine behind ``eval_video_llm.py``).

- :mod:`k9bench.inference.backend`  the backend interface and registry (``--backend``)
- :mod:`k9bench.inference.hf`       the Hugging Face transformers backend
- :mod:`k9bench.inference.runner`   the loop: grouping by video, batching, prefetch, checkpoints,
                                    resume, signals, out-of-memory retry, the raw artifact
"""
