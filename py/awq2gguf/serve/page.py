"""The chat page (gradio), mounted on the API's app.

It streams each answer token by token through llama-server's chat route (the model's own chat
template), in the same queue as the API's requests, then shows the prefill and decode speed
llama.cpp measured for that answer, and how the GGUF was made (its awq2gguf metadata).
"""

from __future__ import annotations

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no phoning home from a server

import gradio as gr  # noqa: E402

from ..metadata import provenance  # noqa: E402
from .engine import EngineAPI  # noqa: E402
from .limits import Admission, OpenAIError  # noqa: E402
from .options import ServeOptions  # noqa: E402

CHAT_PATH = "/v1/chat/completions"


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


def speed_markdown(timings: dict) -> str:
    """llama-server's timings of one answer: the prompt tokens it evaluated (a cached prefix left
    out) and the tokens it decoded, each with its rate."""
    def part(what, n, ms):
        return f"{what} {n} tokens, " + (f"{1000 * n / ms:.1f} t/s" if ms > 0 else "-")
    return (part("prefill", timings["prompt_n"], timings["prompt_ms"]) + " · "
            + part("decode", timings["predicted_n"], timings["predicted_ms"]))


def mount(app, opts: ServeOptions, engine: EngineAPI, admission: Admission, path: str):
    async def respond(message: str, history: list[dict]):
        messages = [{"role": m["role"], "content": _text(m["content"])} for m in history]
        messages.append({"role": "user", "content": message})
        body = {"model": opts.name, "messages": messages, "max_tokens": opts.limits.max_tokens}
        try:
            if refusal := opts.limits.prompt_refusal(await engine.prompt_tokens(CHAT_PATH, body)):
                raise refusal
            release = admission.enter()
        except OpenAIError as e:
            raise gr.Error(f"{e.message}: start a new chat" if e.code == "context_length_exceeded" else e.message)
        try:
            answer, timings = "", None
            async for chunk in engine.chat_events(body):
                if chunk.get("choices"):
                    answer += chunk["choices"][0]["delta"].get("content") or ""
                timings = chunk.get("timings", timings)
                yield answer, "decoding..."
            yield answer, speed_markdown(timings) if timings else ""
        except OpenAIError as e:
            raise gr.Error(e.message)
        finally:
            release()

    with gr.Blocks(title=f"{opts.name} · awq2gguf") as page:
        gr.Markdown(f"### {opts.model.name}\n{opts.build} llama.cpp build · {opts.threads} threads · "
                    f"{opts.parallel} answers decoded together · context {opts.ctx} tokens · "
                    f"answers up to {opts.limits.max_tokens} tokens")
        speed = gr.Markdown("", elem_id="speed")
        gr.ChatInterface(respond, additional_outputs=[speed], flagging_mode="never")
        with gr.Accordion("How this model was made", open=False):
            gr.Markdown(_provenance_markdown(opts.model))
    auth = (lambda _user, password: password == opts.api_key) if opts.api_key else None
    return gr.mount_gradio_app(app, page, path=path, auth=auth,
                               auth_message="Any user name; the server's API key as the password.")
