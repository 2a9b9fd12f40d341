"""One ASGI app: llama-cpp-python's OpenAI-compatible server, our limits, and the chat page.

Import this module only after the chosen build's LLAMA_CPP_LIB_PATH is in the environment:
llama_cpp loads libllama.so when it is imported.
"""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from llama_cpp.server import app as server_app
from llama_cpp.server.errors import RouteErrorHandler
from llama_cpp.server.settings import ModelSettings, ServerSettings

from . import llama_thread
from .limits import LimitsMiddleware, openai_error
from .model import ServeOptions, count_prompt_tokens, refusal

PAGE_PATH = "/chat"
# The model is never loaded for embeddings: llama-cpp-python would answer every request with a 500.
UNSERVED_PATHS = ("/v1/embeddings",)

_library_error_response = RouteErrorHandler.error_message_wrapper


def _error_response(self, error: Exception, body=None):
    """llama-cpp-python's route handler answers 500 to everything it has no pattern for: FastAPI's
    own validation error (a body of the wrong shape) and the ValueError or TypeError it raises itself
    on what a request asks (a tool_choice naming no tool ...). Those are the client's mistakes: 400;
    llama.cpp's own failures (RuntimeError) stay 500."""
    if isinstance(error, RequestValidationError):
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        return 400, openai_error(400, f"invalid request: {fields}", "invalid_request")
    if isinstance(error, (ValueError, TypeError)) and not any(p.search(str(error)) for p in self.pattern_and_formatters):
        return 400, openai_error(400, str(error), "invalid_request")
    return _library_error_response(self, error, body)


def create_app(opts: ServeOptions):
    server_app.run_in_threadpool = llama_thread.run_in_threadpool
    server_app.iterate_in_threadpool = llama_thread.iterate_in_threadpool
    RouteErrorHandler.error_message_wrapper = _error_response
    server = ServerSettings(api_key=opts.api_key, interrupt_requests=False)  # never cut one user's stream for another's
    model = ModelSettings(model=str(opts.model), model_alias=opts.alias, n_ctx=opts.ctx, n_threads=opts.threads,
                          n_threads_batch=opts.threads, verbose=False)
    server_app.router.routes = [r for r in server_app.router.routes if r.path not in UNSERVED_PATHS]
    app = server_app.create_app(server_settings=server, model_settings=[model])

    from . import page  # gradio is heavy: imported once the model has loaded

    app = page.mount(app, opts, PAGE_PATH)
    app.add_api_route("/", lambda: RedirectResponse(PAGE_PATH), include_in_schema=False)
    return LimitsMiddleware(app, opts.limits, count_prompt_tokens, refusal, opts.alias)
