"""The requests awq2gguf-serve takes: OpenAI's completion and chat completion bodies, checked here for
the fields OpenAI defines (types, ranges, roles) and documented in the server's OpenAPI schema with
this server's limits.

Fields beyond them (llama.cpp's own: top_k, min_p, grammar, ignore_eos ...) pass on to llama-server,
which checks them itself. A null is the field's default.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

TokenId = Annotated[int, Field(ge=0)]


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


Content = str | list[TextPart]


class UserMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "tool"]
    content: Content


class AssistantMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["assistant"]
    content: Content | None = Field(None, description="Null only beside tool_calls.")
    tool_calls: list[dict] | None = None


Message = Annotated[UserMessage | AssistantMessage, Field(discriminator="role")]


def request_models(max_answer: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """(completion request, chat completion request) for a server whose answers are at most
    max_answer tokens long. The bound is in the schema for clients to read; the route checks it with a
    message of its own."""

    class Generation(BaseModel):
        model_config = ConfigDict(extra="allow")
        model: str | None = Field(None, description="Ignored: the server serves one model, named by its alias.")
        max_tokens: int | None = Field(None, ge=1, json_schema_extra={"maximum": max_answer},
                                       description="Default and upper bound: the server's --max-tokens.")
        temperature: float | None = Field(None, ge=0, le=2)
        top_p: float | None = Field(None, ge=0, le=1)
        presence_penalty: float | None = Field(None, ge=-2, le=2)
        frequency_penalty: float | None = Field(None, ge=-2, le=2)
        seed: int | None = None
        stop: str | list[str] | None = None
        logit_bias: dict[str, float] | None = None
        n: Literal[1] | None = Field(None, description="One answer per request.")
        stream: bool | None = None

    class CompletionRequest(Generation):
        prompt: str | list[TokenId] = Field(min_length=1, description="One prompt: a text, or token ids.")

    class ChatRequest(Generation):
        messages: list[Message] = Field(min_length=1)

    return CompletionRequest, ChatRequest
