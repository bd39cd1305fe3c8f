"""OpenAI-compatible servers: the client and its bounded runner (openai_api), endpoint checks (endpoint), starting vLLM (serve)."""
