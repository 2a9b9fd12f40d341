"""What one awq2gguf-serve runs: the model, the build, and how much of the machine it may take."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .limits import Limits


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

    @property
    def alias(self) -> str:
        """The model's name in every answer: the file's stem, not a path of the serving machine."""
        return self.model.stem
