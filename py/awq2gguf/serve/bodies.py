"""The requests awq2gguf-serve takes: OpenAI's completion, chat completion and embedding bodies,
checked here for the fields OpenAI defines (types, ranges, roles) and documented in the server's
OpenAPI schema with this server's limits. Types are strict, as OpenAI's: "10" is not a number.

Fields beyond them (llama.cpp's own: top_k, min_p, grammar, ignore_eos ...) pass on to llama-server,
which checks them itself. A null is the field's default.
"""

from __future__ import annotations

from typing import Annotated, Literal, NamedTuple

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator

TokenId = Annotated[int, Field(ge=0)]


class Body(BaseModel):
    """A part of a request: no field's value is converted to the type it should have been sent as."""
    model_config = ConfigDict(strict=True)


class TextPart(Body):
    type: Literal["text"]
    text: str


def _text_only(content):
    """One line for a part the model cannot read (an image, audio), instead of the union's two dumps."""
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and isinstance(part.get("type"), str) and part["type"] != "text":
            raise ValueError(f"this model takes text only, not a content part of type {part['type']!r}")
    return content


Content = Annotated[str | list[TextPart], BeforeValidator(_text_only)]


def _json_pointer_target(schema: dict, ref: str) -> bool:
    """Whether a local $ref ("#/$defs/Name") points at a part of the schema."""
    node = schema
    for token in filter(None, ref[1:].split("/")):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdecimal() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return True


def _refs_resolve(schema: dict | None) -> dict | None:
    """A JSON schema whose every $ref points inside it: llama-server compiles the schema into a grammar
    and can follow nothing else (its own message for a broken $ref speaks of a template parser)."""
    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                if not ref.startswith("#"):
                    raise ValueError(f"$ref {ref!r} is outside the schema: only references into it (#/...) are served")
                if not _json_pointer_target(schema, ref):
                    raise ValueError(f"$ref {ref!r} points at nothing in the schema")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(schema)
    return schema


JsonSchema = Annotated[dict, BeforeValidator(_refs_resolve)]


class UserMessage(Body):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "tool"]
    content: Content


class AssistantMessage(Body):
    model_config = ConfigDict(extra="allow")
    role: Literal["assistant"]
    content: Content | None = Field(None, description="Null only beside tool_calls.")
    tool_calls: list[dict] | None = None


Message = Annotated[UserMessage | AssistantMessage, Field(discriminator="role")]


class FunctionDefinition(Body):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    parameters: JsonSchema | None = Field(None, description="A JSON schema of the arguments.")


class Tool(Body):
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(Body):
    name: str


class NamedToolChoice(Body):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(Body):
    model_config = ConfigDict(extra="allow")
    name: str | None = None
    schema_: JsonSchema = Field(alias="schema", description="The JSON schema the answer follows.")


class ResponseFormat(Body):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = Field(None, description="With type json_schema.")


class StreamOptions(Body):
    include_usage: bool | None = None


MODEL_FIELD = Field(None, description="One of the names /v1/models lists (404 for another); absent or null: the "
                                      "model served.")
MAX_EMBEDDING_INPUTS = 2048  # OpenAI's bound on the texts of one embedding request
Text = Annotated[str, Field(min_length=1)]
Tokens = Annotated[list[TokenId], Field(min_length=1)]


def _one_input_shape(value):
    """One line for an input of none of the four shapes, instead of a dump per shape (thousands for
    a long list)."""
    def ids(v):
        return isinstance(v, list) and v != [] and all(type(i) is int and i >= 0 for i in v)
    if isinstance(value, list) and len(value) > MAX_EMBEDDING_INPUTS and not ids(value):
        raise ValueError(f"holds {len(value)} inputs, over the limit of {MAX_EMBEDDING_INPUTS}")
    if isinstance(value, str) and value or isinstance(value, list) and value != [] and (
            all(isinstance(v, str) and v for v in value) or ids(value) or all(ids(v) for v in value)):
        return value
    raise ValueError("should be a non-empty text, list of texts, list of token ids (>= 0), or list of such lists")


class RequestModels(NamedTuple):
    completion: type[BaseModel]
    chat: type[BaseModel]
    embedding: type[BaseModel]


def request_models(max_answer: int, n_vocab: int, n_embd: int) -> RequestModels:
    """The bodies of a server whose answers are at most max_answer tokens long and whose model has
    n_vocab tokens and n_embd-wide embeddings. The answers' bound is in the schema for clients to
    read; the route checks it with a message of its own."""

    class Generation(Body):
        model_config = ConfigDict(extra="allow")
        model: str | None = MODEL_FIELD
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

    class EmbeddingRequest(Body):
        model_config = ConfigDict(extra="allow")
        model: str | None = MODEL_FIELD
        input: Annotated[Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)] | Tokens
                         | Annotated[list[Tokens], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)],
                         BeforeValidator(_one_input_shape)] = Field(
            description="A text, texts, token ids, or lists of token ids: one embedding each.")
        encoding_format: Literal["float", "base64"] | None = None
        dimensions: int | None = Field(None, description=f"This model's embeddings have {n_embd}: no other number.")
        user: str | None = None

        @field_validator("dimensions")
        @classmethod
        def _model_width(cls, n: int | None) -> int | None:
            if n is not None and n != n_embd:
                raise ValueError(f"this model's embeddings have {n_embd} dimensions, and are not shortened to {n}")
            return n

    return RequestModels(CompletionRequest, ChatRequest, EmbeddingRequest)
