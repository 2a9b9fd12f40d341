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
import pydantic
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_cpp.server import app as server_app
from llama_cpp.server.types import CreateChatCompletionRequest, CreateCompletionRequest

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


def count_prompt_tokens(path: str, body: dict) -> int | None:
    """Prompt tokens of an OpenAI completion or chat completion request body; None if the body does
    not fit the request's schema (the server's own validation answers it). ValueError if the prompt
    cannot be made of it (the chat template fails on its messages)."""
    chat = path.endswith("chat/completions")
    try:
        (CreateChatCompletionRequest if chat else CreateCompletionRequest).model_validate(body)
    except pydantic.ValidationError:
        return None
    llama = loaded_model()
    try:
        if chat:
            return prompt_tokens(llama, chat_prompt(llama, body["messages"]))
        prompt = body.get("prompt", "")  # llama-cpp-python's default; a list holds one text (refusal)
        return prompt_tokens(llama, prompt[0] if isinstance(prompt, list) else prompt)
    except Exception as e:  # the template's own code: jinja2's errors, TypeError on a null content ...
        raise ValueError(f"{type(e).__name__}: {e}") from e


def _given_token_ids(path: str, body: dict) -> list:
    """The token ids a request names as ids: /extras/detokenize's tokens, the keys of logit_bias
    (unless they are texts)."""
    ids = []
    if path.endswith("detokenize") and isinstance(body.get("tokens"), list):
        ids += body["tokens"]
    if isinstance(body.get("logit_bias"), dict) and body.get("logit_bias_type") != "tokens":
        ids += list(body["logit_bias"])
    return ids


def _grammar_parses(llama, grammar: str) -> bool:
    sampler = llama_cpp.llama_sampler_init_grammar(llama_cpp.llama_model_get_vocab(llama.model),
                                                   grammar.encode("utf-8"), b"root")
    if sampler:
        llama_cpp.llama_sampler_free(sampler)
    return bool(sampler)


def refusal(path: str, body: dict) -> str | None:
    """Why llama-cpp-python must not be given this request: a prompt list other than one text (it
    serves one prompt, as text), token ids outside the vocabulary (it crashes on some, fails on
    others) or a grammar that does not parse (it crashes). None if none of these."""
    prompt = body.get("prompt")
    if path == "/v1/completions" and isinstance(prompt, list) and not (len(prompt) == 1 and isinstance(prompt[0], str)):
        return "prompt: one text per request (not token ids, not a batch of prompts)"
    llama = loaded_model()
    n_vocab = llama.n_vocab()
    for t in _given_token_ids(path, body):
        try:
            valid = not isinstance(t, (bool, float)) and 0 <= int(t) < n_vocab
        except (TypeError, ValueError):
            valid = False
        if not valid:
            return f"token id {t!r} is not one of this model's {n_vocab} token ids"
    grammar = body.get("grammar")
    if isinstance(grammar, str) and not _grammar_parses(llama, grammar):
        return "the grammar does not parse: GBNF with a rule named root"
    return None


def perf_counters(llama) -> llama_cpp.llama_perf_context_data:
    return llama_cpp.llama_perf_context(llama.ctx)


def reset_perf_counters(llama) -> None:
    llama_cpp.llama_perf_context_reset(llama.ctx)
