"""Serving a GGUF: OpenAI-compatible API, request limits and a chat page (`awq2gguf-serve`)."""
