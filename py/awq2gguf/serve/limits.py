"""What awq2gguf-serve lets through to llama-server: bounded lengths, a bounded number of requests
in flight, and OpenAI's error shape for every refusal, so clients show the message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fastapi.responses import JSONResponse

# Bytes a request body may take per prompt token the server accepts, on top of a fixed allowance
# for the rest of the request: far more than any tokenizer's longest token needs.
BODY_BYTES_PER_TOKEN = 64
BODY_BYTES_BASE = 1 << 20


@dataclass(frozen=True)
class Limits:
    max_prompt_tokens: int
    max_tokens: int
    queue: int

    @property
    def max_body_bytes(self) -> int:
        return BODY_BYTES_BASE + BODY_BYTES_PER_TOKEN * self.max_prompt_tokens

    def prompt_refusal(self, n: int) -> OpenAIError | None:
        if n == 0:  # nothing to continue from (a model without a BOS token, an empty prompt)
            return OpenAIError(400, "the prompt is empty", "empty_prompt")
        if n > self.max_prompt_tokens:
            return OpenAIError(400, f"the prompt is {n} tokens, over this server's limit of {self.max_prompt_tokens}",
                               "context_length_exceeded")
        return None

    def max_tokens_refusal(self, n: int) -> OpenAIError | None:
        if n > self.max_tokens:
            return OpenAIError(400, f"max_tokens {n} is over this server's limit of {self.max_tokens}",
                               "max_tokens_exceeded")
        return None


class OpenAIError(Exception):
    """A refusal as the client gets it: status, message, code (and headers)."""

    def __init__(self, status: int, message: str, code: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": "invalid_request_error" if self.status < 500 else
                          "server_error", "param": None, "code": self.code}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status, headers=self.headers)


class Admission:
    """Generation requests in llama-server (decoding in a slot or waiting for one), at most `queue`:
    one more is refused with 503. One event loop admits and releases: no lock needed."""

    def __init__(self, queue: int):
        self.queue, self.in_flight = queue, 0

    def enter(self) -> Callable[[], None]:
        """Admits one request (OpenAIError 503 if the queue is full); returns what releases its place,
        which may be called more than once."""
        if self.in_flight >= self.queue:
            raise OpenAIError(503, f"the server is busy: {self.in_flight} requests are already running or waiting "
                                   f"(queue of {self.queue}); retry later", "server_busy", {"retry-after": "1"})
        self.in_flight += 1
        released = False

        def release():
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1
        return release
