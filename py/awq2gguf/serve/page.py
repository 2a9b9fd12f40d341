"""The chat page (gradio), mounted on the OpenAI server's app.

It streams each answer token by token through the model's own chat template, holding the same
lock as the API routes, then shows the prefill and decode speed of that answer, and how the GGUF
was made (its awq2gguf metadata).
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no phoning home from a server

import gradio as gr  # noqa: E402

from .model import (ServeOptions, chat_prompt, model_turn, perf_counters, prompt_tokens,  # noqa: E402
                    reset_perf_counters)
from .llama_thread import iterate_in_threadpool  # noqa: E402
from ..metadata import provenance  # noqa: E402


def _provenance_markdown(model) -> str:
    rows = provenance(model)
    if not rows:
        return f"`{model.name}` carries no awq2gguf metadata: it was not made by awq2gguf."
    return "| made with | |\n| --- | --- |\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


def _text(content) -> str:
    """A message's text, whether gradio gives it as a string or as a list of parts."""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def speed_markdown(n_prefill: int, prefill_s: float, n_decode: int, decode_s: float) -> str:
    def rate(n, s):
        return f"{n / s:.1f} t/s" if s > 0 else "-"
    return (f"prefill {n_prefill} tokens, {rate(n_prefill, prefill_s)} · "
            f"decode {n_decode} tokens, {rate(n_decode, decode_s)}")


def mount(app, opts: ServeOptions, path: str):
    async def respond(message: str, history: list[dict]):
        messages = [{"role": m["role"], "content": _text(m["content"])} for m in history]
        messages.append({"role": "user", "content": message})
        async with model_turn() as llama:
            if refusal := opts.limits.prompt_refusal(prompt_tokens(llama, chat_prompt(llama, messages))):
                raise gr.Error(f"{refusal}: start a new chat")
            # Token counts from llama.cpp (the prompt tokens it evaluated, a cached prefix left out;
            # the tokens it decoded), times as the page sees them: prefill until the first token,
            # decode from there to the last.
            reset_perf_counters(llama)
            answer, start, first = "", time.perf_counter(), None
            stream = llama.create_chat_completion(messages=messages, stream=True, max_tokens=opts.limits.max_tokens)
            async for chunk in iterate_in_threadpool(stream):
                first = first or time.perf_counter()
                answer += chunk["choices"][0]["delta"].get("content") or ""
                yield answer, "decoding..."
            perf, end = perf_counters(llama), time.perf_counter()
            yield answer, speed_markdown(perf.n_p_eval, (first or end) - start, perf.n_eval, end - (first or end))

    with gr.Blocks(title=f"{opts.alias} · awq2gguf") as page:
        gr.Markdown(f"### {opts.model.name}\n{opts.build} llama.cpp build · {opts.threads} threads · "
                    f"context {opts.ctx} tokens · answers up to {opts.limits.max_tokens} tokens")
        speed = gr.Markdown("", elem_id="speed")
        gr.ChatInterface(respond, additional_outputs=[speed], flagging_mode="never")
        with gr.Accordion("How this model was made", open=False):
            gr.Markdown(_provenance_markdown(opts.model))
    auth = (lambda _user, password: password == opts.api_key) if opts.api_key else None
    return gr.mount_gradio_app(app, page, path=path, auth=auth,
                               auth_message="Any user name; the server's API key as the password.")
