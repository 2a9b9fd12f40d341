"""Request limits in front of llama-cpp-python's OpenAI server: bounded lengths, a bounded queue,
and no request that would make it fail.

llama-cpp-python serves one request at a time behind a lock and lets the others wait without
bound; a streamed request whose prompt does not fit fails after its 200 header is sent, a chat
request without max_tokens generates until the context is full, a body that is not JSON gets a
500, a request that names no model gets an answer naming the model by its file path, and some
bodies crash the whole process (a token id beyond the vocabulary in /extras/detokenize, a grammar
that does not parse). This ASGI middleware answers before any of that: 400 for a body that is not
a JSON object, for what the model module's `refusal` finds wrong with it, and for a prompt or
max_tokens over the limits (OpenAI's error shape, so clients show the message), 503 when `queue`
generation requests are already in flight (running or waiting); it fills in max_tokens where a chat
request leaves it out, and the model's alias as the request's model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

GENERATION_PATHS = ("/v1/completions", "/v1/chat/completions")
TOKEN_PATHS = ("/extras/tokenize", "/extras/tokenize/count", "/extras/detokenize")  # checked, not queued


@dataclass(frozen=True)
class Limits:
    max_prompt_tokens: int
    max_tokens: int
    queue: int

    def prompt_refusal(self, n: int) -> str | None:
        """Why a prompt of n tokens is refused, or None."""
        if n > self.max_prompt_tokens:
            return f"the prompt is {n} tokens, over this server's limit of {self.max_prompt_tokens}"
        return None


def openai_error(status: int, message: str, code: str) -> dict:
    """The inside of OpenAI's error body ({"error": this}), so clients show the message."""
    return {"message": message, "type": "invalid_request_error" if status == 400 else "server_error", "param": None,
            "code": code}


def _error_response(status: int, message: str, code: str, headers: tuple = ()) -> tuple[int, bytes, tuple]:
    body = json.dumps({"error": openai_error(status, message, code)}).encode()
    return status, body, ((b"content-type", b"application/json"), *headers)


class LimitsMiddleware:
    """count_prompt(path, body) -> prompt tokens of a generation request's JSON body (None: it is
    malformed, ValueError: no prompt can be made of it); refusal(path,
    body) -> why the server must not run it, or None; alias: the name every answer gives the model."""

    def __init__(self, app, limits: Limits, count_prompt: Callable[[str, dict], int | None],
                 refusal: Callable[[str, dict], str | None], alias: str):
        self.app, self.limits, self.count_prompt, self.refusal, self.alias = app, limits, count_prompt, refusal, alias
        self.in_flight = 0  # one event loop: no lock needed

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_PATHS + TOKEN_PATHS:
            return await self.app(scope, receive, send)
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        refusal, raw = self._check(scope["path"], raw)
        if refusal is not None:
            status, body, headers = refusal
            await send({"type": "http.response.start", "status": status, "headers": list(headers)})
            await send({"type": "http.response.body", "body": body})
            return

        replayed = False

        async def replay():
            """The (possibly rewritten) body once, then the client's own messages (its disconnect)."""
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": raw, "more_body": False}

        if scope["path"] in TOKEN_PATHS:
            return await self.app(scope, replay, send)
        # Out of the queue with the last byte of its answer, not when the app returns: a streamed
        # response tidies up after the client has it all, and the client's next request must fit.
        self.in_flight += 1
        done = False

        def finish():
            nonlocal done
            if not done:
                done = True
                self.in_flight -= 1

        async def send_and_count(message):
            if message["type"] == "http.response.body" and not message.get("more_body"):
                finish()
            await send(message)

        try:
            await self.app(scope, replay, send_and_count)
        finally:
            finish()

    def _check(self, path: str, raw: bytes):
        """(refusal or None, the body to pass on)."""
        if path in GENERATION_PATHS and self.in_flight >= self.limits.queue:
            return _error_response(503, f"the server is busy: {self.in_flight} requests are already running or "
                                        f"waiting (queue of {self.limits.queue}); retry later",
                                   "server_busy", ((b"retry-after", b"1"),)), raw
        try:
            body = json.loads(raw)
        except ValueError as e:
            return _error_response(400, f"the request body is not valid JSON: {e}", "invalid_json"), raw
        if not isinstance(body, dict):
            return _error_response(400, "the request body must be a JSON object", "invalid_json"), raw
        if reason := self.refusal(path, body):
            return _error_response(400, reason, "invalid_request"), raw
        if path in TOKEN_PATHS:
            return None, raw
        # null is OpenAI's "the default"; llama-cpp-python would pass some of them on to llama.cpp as is.
        body = {k: v for k, v in body.items() if v is not None}
        body["model"] = self.alias
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, int) and max_tokens > self.limits.max_tokens:
            return _error_response(400, f"max_tokens {max_tokens} is over this server's limit of "
                                        f"{self.limits.max_tokens}", "max_tokens_exceeded"), raw
        if max_tokens is None and path.endswith("chat/completions"):
            body["max_tokens"] = self.limits.max_tokens  # else a chat answer runs until the context is full
        raw = json.dumps(body).encode()
        try:
            n = self.count_prompt(path, body)
        except ValueError as e:
            return _error_response(400, f"the prompt cannot be made of this request: {e}", "invalid_request"), raw
        if n is None:
            return None, raw  # a malformed request: the server's own validation answers it
        if n == 0:  # nothing to continue from (a model without a BOS token, an empty prompt)
            return _error_response(400, "the prompt is empty", "empty_prompt"), raw
        if refusal := self.limits.prompt_refusal(n):
            return _error_response(400, refusal, "context_length_exceeded"), raw
        return None, raw
