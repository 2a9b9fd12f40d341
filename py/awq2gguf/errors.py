"""The toolkit's one error base class, and the error of a tool that failed, quoting the tail of what
it said."""

from __future__ import annotations

# Lines of a failed tool's output quoted in its error: enough for llama.cpp's last log lines and a
# Python traceback's end.
TAIL_LINES = 12


class Awq2ggufError(Exception):
    """A failure the user can act on, with a message that says what and why; the command lines print
    it without a traceback and exit 1."""


class ToolFailed(Awq2ggufError):
    pass


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def tool_failure(what: str, returncode: int, output: str,
                 error: type[Awq2ggufError] = ToolFailed) -> Awq2ggufError:
    """The one message of a failed tool: what failed, its exit code and the tail of its output."""
    return error(f"{what} failed ({returncode}):\n{tail(output)}")
