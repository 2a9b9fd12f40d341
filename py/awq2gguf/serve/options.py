"""What one awq2gguf-serve runs: the model, the build, and how much of the machine it may take."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .limits import Limits

# Host memory for finished prompts' KV, bounded: llama-server's own default let the soak's RSS grow
# (bench/results/README.md, "Prompt cache").
DEFAULT_PROMPT_CACHE_MIB = 256


@dataclass(frozen=True)
class Speculation:
    spec_type: str | None  # llama-server's --spec-type
    args: tuple[str, ...] = ()


# --spec: llama-server's n-gram speculation as awq2gguf-serve offers it: ngram-simple finds the last 4
# tokens earlier in the request's text and drafts the 16 that followed them (the kind and the lengths
# chosen by bench serve --speculation: bench/results/README.md, "Speculative decoding").
SPECULATION = {
    "none": Speculation(None),
    "ngram": Speculation("ngram-simple", ("--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "16")),
}


@dataclass(frozen=True)
class ServeOptions:
    model: Path
    build: str
    threads: int
    ctx: int  # per request: prompt and answer together
    parallel: int  # requests decoded together, each in its own llama-server slot
    limits: Limits
    api_key: str | None
    rpc: tuple[str, ...] = ()  # ggml-rpc-servers (HOST:PORT) the model's layers are split over
    page: bool = True  # the chat page; without it gradio is never imported (API only)
    prompt_cache_mib: int = DEFAULT_PROMPT_CACHE_MIB  # finished prompts' KV, for later prompts that start so
    spec: str = "none"  # a key of SPECULATION: how llama-server drafts tokens without a draft model
    draft: Path | None = None  # a small GGUF with the model's vocabulary that drafts tokens for it to verify
    aliases: tuple[str, ...] = ()  # names a request's `model` may give besides the file's stem
    embeddings: bool = True  # /v1/embeddings, served by an engine of its own
    pooling: str | None = None  # how a text's token vectors become its embedding; None: embedding_pooling()

    @property
    def name(self) -> str:
        """The model's name in every answer: the file's stem, not a path of the serving machine."""
        return self.model.stem

    @property
    def names(self) -> tuple[str, ...]:
        """What /v1/models lists and a request's `model` may say."""
        return (self.name, *(a for a in self.aliases if a != self.name))
