"""awq2gguf-serve's HTTP face: OpenAI's routes in front of llama-server (the key, the limits, the
queue, the model's alias), and the chat page."""

# No `from __future__ import annotations`: FastAPI reads the routes' body types, made per app in
# _add_generation_routes, from their annotations.
import secrets

import httpx
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from .engine import EngineAPI, error_message
from .limits import Admission, Limits, OpenAIError
from .metrics import FrontMetrics
from .options import ServeOptions
from .bodies import RequestModels, request_models

PAGE_PATH = "/chat"
API_PREFIX = "/v1/"
METRICS_PATH = "/metrics"


def _validation_error(_request, error: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 as a 400 in OpenAI's shape, saying which fields are wrong and why."""
    errors = error.errors()
    for e in errors:
        if e["type"] == "json_invalid":
            return OpenAIError(400, f"the request body is not valid JSON: {e['ctx']['error']}", "invalid_json").response()
        if tuple(e["loc"]) == ("body",) and e["type"] == "model_attributes_type":
            return OpenAIError(400, "the request body must be a JSON object", "invalid_json").response()
    fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in errors)
    return OpenAIError(400, f"invalid request: {fields}", "invalid_request").response()


def _http_error(_request, error: HTTPException) -> JSONResponse:
    """Starlette's own refusals (404, 405, a body it cannot parse) in OpenAI's shape."""
    return OpenAIError(error.status_code, str(error.detail), "invalid_request", error.headers).response()


class _Gate:
    """Before the API's routes and the metrics: the API key (401), and a body no longer than the limits
    allow (413). Every answer is counted in the metrics."""

    def __init__(self, app, api_key: str | None, max_body_bytes: int, metrics: FrontMetrics):
        self.app, self.max_body_bytes, self.metrics = app, max_body_bytes, metrics
        self.authorization = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counted(message):
            if message["type"] == "http.response.start":
                self.metrics.answered(scope["path"], message["status"])
            await send(message)

        await self._gated(scope, receive, counted)

    async def _gated(self, scope, receive, send):
        if not (scope["path"].startswith(API_PREFIX) or scope["path"] == METRICS_PATH):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.authorization and not secrets.compare_digest(headers.get(b"authorization", b""), self.authorization):
            self.metrics.key_failures.inc()
            return await OpenAIError(401, "this server needs its API key: Authorization: Bearer KEY",
                                     "invalid_api_key").response()(scope, receive, send)
        length = headers.get(b"content-length", b"0")
        if length.isdigit() and int(length) > self.max_body_bytes:
            return await self._too_large(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body_bytes:
                return await self._too_large(scope, receive, send)
        replayed = False

        async def replay():
            """The body once, then the client's own messages (its disconnect)."""
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        # The API takes JSON only: a body sent as a form (curl -d without a content-type) is read as JSON too.
        scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"content-type"]
                 + [(b"content-type", b"application/json")]}
        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send):
        await OpenAIError(413, f"the request body is over this server's limit of {self.max_body_bytes} bytes",
                          "request_too_large").response()(scope, receive, send)


class _Relay(StreamingResponse):
    """llama-server's event stream passed on as it comes. The request leaves the queue with the last
    byte of its answer (the client's next request must fit), or when the client goes away; then the
    stream from llama-server is closed, which stops its generation."""

    def __init__(self, upstream: httpx.Response, release):
        super().__init__(self._passed_on(upstream), media_type="text/event-stream")
        self.upstream, self.release = upstream, release

    @staticmethod
    async def _passed_on(upstream: httpx.Response):
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.TransportError:
            pass  # llama-server went away mid-answer: the answer ends there (and awq2gguf-serve stops)

    async def __call__(self, scope, receive, send):
        async def send_and_release(message):
            if message["type"] == "http.response.body" and not message.get("more_body"):
                self.release()
            await send(message)

        try:
            await super().__call__(scope, receive, send_and_release)
        finally:
            self.release()
            await self.upstream.aclose()


def as_llama_server_takes(path: str, body: dict, takes_tools: bool) -> dict:
    """The request as llama-server serves it as OpenAI would; 400 for what it would ignore or answer in
    another shape. A named tool_choice (which llama-server reads as "auto") becomes "required" with
    that tool alone."""
    if path == "/v1/completions" and body.get("logprobs") is not None:
        raise OpenAIError(400, "logprobs are served on /v1/chat/completions (logprobs, top_logprobs), not on "
                               "/v1/completions, where llama-server does not give OpenAI's shape", "unsupported")
    if body.get("tools") and not takes_tools:
        raise OpenAIError(400, "this model's chat template takes no tools", "unsupported")
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        name = choice["function"]["name"]
        named = [t for t in body.get("tools", []) if t["function"]["name"] == name]
        if not named:
            raise OpenAIError(400, f"tool_choice names {name!r}, which is not among the tools", "invalid_request")
        body = {**body, "tools": named, "tool_choice": "required"}
    return body


def _served_model(opts: ServeOptions, name: str | None) -> None:
    """404 for a `model` that names another model than this server's (absent or null: this one)."""
    if name is not None and name not in opts.names:
        raise OpenAIError(404, f"the model {name!r} is not served here, only {' or '.join(map(repr, opts.names))} "
                               "(see /v1/models)", "model_not_found")


def create_app(opts: ServeOptions, engine: EngineAPI, embedder: EngineAPI | None = None):
    """The app in front of the chat engine, and of the embedding engine if there is one."""
    admission = Admission(opts.limits.queue)
    app = FastAPI(title="awq2gguf-serve", summary=f"{opts.model.name} on the {opts.build} llama.cpp build",
                  exception_handlers={RequestValidationError: _validation_error, HTTPException: _http_error,
                                      OpenAIError: lambda _request, e: e.response()})
    bodies = request_models(opts.limits.max_tokens, engine.facts.n_vocab, engine.facts.n_embd)
    _add_generation_routes(app, opts, engine, admission, bodies)
    _add_embeddings_route(app, opts, embedder, bodies.embedding)
    _add_models_route(app, opts)
    front_metrics = _add_metrics_route(app, engine, admission)
    if opts.page:
        from . import page  # gradio is heavy: imported once the engine has loaded the model, and only for the page

        app = page.mount(app, opts, engine, admission, PAGE_PATH)
        app.add_api_route("/", lambda: RedirectResponse(PAGE_PATH), include_in_schema=False)
    return _Gate(app, opts.api_key, opts.limits.max_body_bytes, front_metrics)


async def _sent(engine: EngineAPI, path: str, body: dict, admission: Admission):
    """(llama-server's response, its body not read yet; what releases the request's place in the queue)."""
    release = admission.enter()
    try:
        return await engine.send(path, body), release
    except BaseException:
        release()
        raise


async def _answer_of(engine: EngineAPI, upstream: httpx.Response, release) -> Response:
    """llama-server's whole answer, the request's place released once it is read."""
    try:
        content = await upstream.aread()
    finally:
        await upstream.aclose()
        release()
    if upstream.status_code == 500 and engine.failure is None:
        # llama-server's 500 is an exception its handler met in this request (a tool's schema it
        # cannot compile, a message it cannot template): the request's, with llama-server's reason
        raise OpenAIError(400, f"llama-server cannot serve this request: {error_message(upstream)}", "invalid_request")
    return Response(content, upstream.status_code, media_type=upstream.headers.get("content-type"))


def _add_generation_routes(app: FastAPI, opts: ServeOptions, engine: EngineAPI, admission: Admission,
                           bodies: RequestModels):
    """/v1/completions and /v1/chat/completions: checked against the limits, queued, sent to llama-server."""
    limits: Limits = opts.limits
    CompletionRequest, ChatRequest = bodies.completion, bodies.chat

    async def generate(path: str, request: BaseModel) -> Response:
        _served_model(opts, request.model)
        body = as_llama_server_takes(path, request.model_dump(exclude_none=True, by_alias=True),
                                     engine.facts.takes_tools)
        body["model"] = opts.name
        body.setdefault("max_tokens", limits.max_tokens)
        if refusal := limits.max_tokens_refusal(body["max_tokens"]):
            raise refusal
        if refusal := limits.prompt_refusal(await engine.prompt_tokens(path, body)):
            raise refusal
        upstream, release = await _sent(engine, path, body, admission)
        if upstream.status_code == 200 and body.get("stream"):
            return _Relay(upstream, release)
        return await _answer_of(engine, upstream, release)

    @app.post("/v1/completions")
    async def completions(request: CompletionRequest) -> Response:
        return await generate("/v1/completions", request)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatRequest) -> Response:
        return await generate("/v1/chat/completions", request)


def _add_embeddings_route(app: FastAPI, opts: ServeOptions, embedder: EngineAPI | None, EmbeddingRequest):
    """/v1/embeddings on the embedding engine, with a queue of its own: each input checked against the
    prompt limit (the engine's batch), then sent as it came."""
    if embedder is None:
        @app.post("/v1/embeddings", include_in_schema=False)
        def no_embeddings():
            raise OpenAIError(404, "this server serves no embeddings (it was started with --no-embeddings or --rpc)",
                              "unsupported")
        return
    admission = Admission(opts.limits.queue)

    @app.post("/v1/embeddings")
    async def embeddings(request: EmbeddingRequest) -> Response:
        _served_model(opts, request.model)
        body = {**request.model_dump(exclude_none=True), "model": opts.name}
        inputs = body["input"]
        inputs = [inputs] if isinstance(inputs, str) or isinstance(inputs[0], int) else inputs
        for i, one in enumerate(inputs):
            n = len(one) if isinstance(one, list) else await embedder.text_tokens(one)
            if refusal := opts.limits.prompt_refusal(n, f"input {i}" if len(inputs) > 1 else "the input"):
                raise refusal
        return await _answer_of(embedder, *await _sent(embedder, "/v1/embeddings", body, admission))


def _add_models_route(app: FastAPI, opts: ServeOptions):
    @app.get("/v1/models")
    def models() -> dict:
        created = int(opts.model.stat().st_mtime)
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "awq2gguf", "created": created}
                                           for name in opts.names]}


def _add_metrics_route(app: FastAPI, engine: EngineAPI, admission: Admission) -> FrontMetrics:
    """/metrics, counting the answers of the routes the app has so far, the metrics' own and the page's."""
    front_metrics = FrontMetrics(admission, {route.path for route in app.routes} | {METRICS_PATH, PAGE_PATH})

    @app.get(METRICS_PATH, response_class=PlainTextResponse)
    async def metrics() -> str:
        """Prometheus metrics: llama-server's own (llamacpp:*), then this server's (awq2gguf_*)."""
        return (await engine.metrics()) + front_metrics.text()

    return front_metrics
