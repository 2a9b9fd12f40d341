"""One ASGI app: llama-cpp-python's OpenAI-compatible server, our limits, and the chat page.

Import this module only after the chosen build's LLAMA_CPP_LIB_PATH is in the environment:
llama_cpp loads libllama.so when it is imported.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
from fastapi.responses import RedirectResponse
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_cpp.server import app as server_app
from llama_cpp.server.settings import ModelSettings, ServerSettings

from . import llama_thread
from .limits import Limits, LimitsMiddleware

PAGE_PATH = "/chat"


@dataclass(frozen=True)
class ServeOptions:
    model: Path
    build: str
    threads: int
    ctx: int
    limits: Limits
    api_key: str | None


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


def create_app(opts: ServeOptions):
    server_app.run_in_threadpool = llama_thread.run_in_threadpool
    server_app.iterate_in_threadpool = llama_thread.iterate_in_threadpool
    server = ServerSettings(api_key=opts.api_key, interrupt_requests=False)  # never cut one user's stream for another's
    model = ModelSettings(model=str(opts.model), model_alias=opts.model.stem, n_ctx=opts.ctx, n_threads=opts.threads,
                          n_threads_batch=opts.threads, verbose=False)
    app = server_app.create_app(server_settings=server, model_settings=[model])

    from . import page  # gradio is heavy: imported once the model has loaded

    app = page.mount(app, opts, PAGE_PATH)
    app.add_api_route("/", lambda: RedirectResponse(PAGE_PATH), include_in_schema=False)
    return LimitsMiddleware(app, opts.limits, count_prompt_tokens)


def perf_counters(llama) -> llama_cpp.llama_perf_context_data:
    return llama_cpp.llama_perf_context(llama.ctx)


def reset_perf_counters(llama) -> None:
    llama_cpp.llama_perf_context_reset(llama.ctx)
