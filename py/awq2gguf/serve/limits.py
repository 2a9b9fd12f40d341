"""What awq2gguf-serve lets through to llama-server: bounded lengths, a bounded number of requests
in flight, and OpenAI's error shape for every refusal, so clients show the message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fastapi.responses import JSONResponse

# A request body's bytes, at most: room for a whole context of text or token ids, and for a batch of
# embedding inputs; refused (413) before more than this is read.
DEFAULT_MAX_BODY_MIB = 8


@dataclass(frozen=True)
class Limits:
    max_prompt_tokens: int
    max_tokens: int
    queue: int
    max_body_bytes: int = DEFAULT_MAX_BODY_MIB << 20

    def prompt_refusal(self, n: int, what: str = "the prompt") -> OpenAIError | None:
        """For a prompt (or an embedding's input) of n tokens."""
        if n == 0:  # nothing to continue from (a model without a BOS token, an empty prompt)
            return OpenAIError(400, f"{what} is empty", "empty_prompt")
        if n > self.max_prompt_tokens:
            return OpenAIError(400, f"{what} is {n} tokens, over this server's limit of {self.max_prompt_tokens}",
                               "context_length_exceeded")
        return None

    def max_tokens_refusal(self, n: int) -> OpenAIError | None:
        if n > self.max_tokens:
            return OpenAIError(400, f"max_tokens {n} is over this server's limit of {self.max_tokens}",
                               "max_tokens_exceeded")
        return None


RETRY_AFTER_S = 1  # what a 503 tells the client to wait: a place in the queue frees within an answer


class OpenAIError(Exception):
    """A refusal as the client gets it: status, message, code (and headers; a 503's say when to retry)."""

    def __init__(self, status: int, message: str, code: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        headers = {**({"retry-after": str(RETRY_AFTER_S)} if status == 503 else {}), **(headers or {})}
        self.status, self.message, self.code, self.headers = status, message, code, headers

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
                                   f"(queue of {self.queue}); retry later", "server_busy")
        self.in_flight += 1
        released = False

        def release():
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1
        return release
