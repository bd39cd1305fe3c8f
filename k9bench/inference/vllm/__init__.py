"""``--backend vllm``: vLLM in-process. :mod:`.backend` is the engine (import it only where vLLM is
installed), :mod:`.settings` its flags (importable anywhere, no vLLM needed)."""
