"""bench: speed, memory and accuracy of the builds and of awq2gguf, side by side with the peers."""

from ..errors import Awq2ggufError


class BenchError(Awq2ggufError):
    """A measurement could not be made: a tool failed or printed something bench cannot read."""
