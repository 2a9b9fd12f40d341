"""The served model as the OpenAI routes hold it: its lock, its chat template, token counts and
llama.cpp's performance counters; shared by the app and the chat page.

Import this module only after the chosen build's LLAMA_CPP_LIB_PATH is in the environment:
llama_cpp loads libllama.so when it is imported.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_cpp.server import app as server_app

from .limits import Limits


@dataclass(frozen=True)
class ServeOptions:
    model: Path
    build: str
    threads: int
    ctx: int
    limits: Limits
    api_key: str | None

    @property
    def alias(self) -> str:
        """The model's name in every answer: the file's stem, not a path of the serving machine."""
        return self.model.stem


def loaded_model():
    """The server's Llama object, without taking its lock (for read-only use: tokenizing)."""
    return server_app._llama_proxy(None)


@contextlib.asynccontextmanager
async def model_turn():
    """The server's Llama object while holding the lock its OpenAI routes take: the page's
    requests queue with the API's and never interleave with them."""
    async with contextlib.asynccontextmanager(server_app.get_llama_proxy)() as proxy:
        yield proxy(None)


@functools.cache
def _chat_formatter(template: str, eos_token: str, bos_token: str) -> Jinja2ChatFormatter:
    """Compiled once per template, not per request."""
    return Jinja2ChatFormatter(template=template, eos_token=eos_token, bos_token=bos_token)


def chat_prompt(llama, messages: list[dict]) -> str:
    """The text the model's own chat template makes of messages (the generation prompt included)."""
    template = llama.metadata.get("tokenizer.chat_template")
    if template is None:
        return "\n".join(str(m["content"]) for m in messages)

    def text(token: int) -> str:
        return llama._model.token_get_text(token) if token != -1 else ""

    return _chat_formatter(template, text(llama.token_eos()), text(llama.token_bos()))(messages=messages).prompt


def prompt_tokens(llama, prompt: str) -> int:
    return len(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))


def count_prompt_tokens(path: str, body: dict) -> int:
    """Prompt tokens of an OpenAI completion or chat completion request body."""
    llama = loaded_model()
    if path.endswith("chat/completions"):
        return prompt_tokens(llama, chat_prompt(llama, body["messages"]))
    prompt = body["prompt"]
    if isinstance(prompt, list):  # a batch of prompts, or one prompt as token ids
        return len(prompt) if all(isinstance(t, int) for t in prompt) else max(
            count_prompt_tokens(path, {"prompt": p}) for p in prompt)
    return prompt_tokens(llama, prompt)


def perf_counters(llama) -> llama_cpp.llama_perf_context_data:
    return llama_cpp.llama_perf_context(llama.ctx)


def reset_perf_counters(llama) -> None:
    llama_cpp.llama_perf_context_reset(llama.ctx)
