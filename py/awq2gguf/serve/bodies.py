"""The requests awq2gguf-serve takes: OpenAI's completion and chat completion bodies, checked here for
the fields OpenAI defines (types, ranges, roles) and documented in the server's OpenAPI schema with
this server's limits.

Fields beyond them (llama.cpp's own: top_k, min_p, grammar, ignore_eos ...) pass on to llama-server,
which checks them itself. A null is the field's default.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: dict | None = Field(None, description="A JSON schema of the arguments.")


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str | None = None
    schema_: dict = Field(alias="schema", description="The JSON schema the answer follows.")


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, description="With type json_schema.")


class StreamOptions(BaseModel):
    include_usage: bool | None = None


def request_models(max_answer: int, n_vocab: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """(completion request, chat completion request) for a server whose answers are at most
    max_answer tokens long and whose model has n_vocab tokens. The bound is in the schema for clients
    to read; the route checks it with a message of its own."""

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
        logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = Field(
            None, description=f"Token id (0 to {n_vocab - 1}) to a bias added to its logit.")
        n: Literal[1] | None = Field(None, description="One answer per request.")
        stream: bool | None = None
        stream_options: StreamOptions | None = None

        @field_validator("logit_bias")
        @classmethod
        def _in_vocabulary(cls, bias: dict[str, float] | None) -> dict[str, float] | None:
            for key in bias or {}:
                if not key.isdecimal() or int(key) >= n_vocab:
                    raise ValueError(f"{key!r} is not a token id of this model (0 to {n_vocab - 1})")
            return bias

    class CompletionRequest(Generation):
        prompt: str | list[TokenId] = Field(min_length=1, description="One prompt: a text, or token ids.")

    class ChatRequest(Generation):
        messages: list[Message] = Field(min_length=1)
        logprobs: bool | None = None
        top_logprobs: int | None = Field(None, ge=0, le=20, description="With logprobs: the likeliest tokens "
                                                                         "at each step.")
        tools: list[Tool] | None = None
        tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
        parallel_tool_calls: bool | None = None
        response_format: ResponseFormat | None = None

    return CompletionRequest, ChatRequest
