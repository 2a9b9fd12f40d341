"""The command classes: the toolkit's errors as one line, a stop as a stop."""

import click
from click.testing import CliRunner

from awq2gguf.cli_base import Command
from awq2gguf.errors import ToolFailed


def test_a_command_turns_the_toolkits_errors_into_one_line():
    @click.command(cls=Command)
    def failing():
        raise ToolFailed("llama-quantize failed (1):\nout of disk")
    result = CliRunner().invoke(failing)
    assert result.exit_code == 1
    assert result.output == "Error: llama-quantize failed (1):\nout of disk\n"
    assert result.exc_info[0] is SystemExit  # no traceback


def test_a_stop_that_lands_while_a_class_is_made_is_still_the_stop():
    """SIGTERM's handler raises SystemExit(143) wherever the job is; inside an import, Python wraps an
    exception from a class attribute's __set_name__ in a RuntimeError (seen once in CI's SIGTERM test)."""
    class Stopped:
        def __set_name__(self, owner, name):
            raise SystemExit(143)

    @click.command(cls=Command)
    def importing():
        type("Made", (), {"field": Stopped()})
    result = CliRunner().invoke(importing)
    assert result.exit_code == 143 and result.output == ""
