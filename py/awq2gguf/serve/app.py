"""One ASGI app: llama-cpp-python's OpenAI-compatible server, our limits, and the chat page.

Import this module only after the chosen build's LLAMA_CPP_LIB_PATH is in the environment:
llama_cpp loads libllama.so when it is imported.
"""

from __future__ import annotations

from fastapi.responses import RedirectResponse
from llama_cpp.server import app as server_app
from llama_cpp.server.settings import ModelSettings, ServerSettings

from . import llama_thread
from .limits import LimitsMiddleware
from .model import ServeOptions, count_prompt_tokens

PAGE_PATH = "/chat"


def create_app(opts: ServeOptions):
    server_app.run_in_threadpool = llama_thread.run_in_threadpool
    server_app.iterate_in_threadpool = llama_thread.iterate_in_threadpool
    server = ServerSettings(api_key=opts.api_key, interrupt_requests=False)  # never cut one user's stream for another's
    model = ModelSettings(model=str(opts.model), model_alias=opts.alias, n_ctx=opts.ctx, n_threads=opts.threads,
                          n_threads_batch=opts.threads, verbose=False)
    app = server_app.create_app(server_settings=server, model_settings=[model])

    from . import page  # gradio is heavy: imported once the model has loaded

    app = page.mount(app, opts, PAGE_PATH)
    app.add_api_route("/", lambda: RedirectResponse(PAGE_PATH), include_in_schema=False)
    return LimitsMiddleware(app, opts.limits, count_prompt_tokens, opts.alias)
