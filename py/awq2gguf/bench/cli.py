"""`bench`: A/B measurements of the stock and patched builds, run interleaved in one invocation.
Each command lives in its own module under commands/; `bench report` renders saved reports."""

from __future__ import annotations

from pathlib import Path

import click

from ..cli_base import Group
from . import results, tables
from .commands.arm import arm
from .commands.awq import awq
from .commands.awq_cost import awq_cost
from .commands.batched import batched
from .commands.eval import eval_
from .commands.lora import lora
from .commands.ops import ops
from .commands.prune import prune
from .commands.roofline import roofline
from .commands.serve import serve
from .commands.speed import decode, prefill


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Measure the stock and patched llama.cpp builds against each other.

    Speed commands run the builds interleaved in one invocation and report the ratio against
    the first build, since absolute timings on a shared machine are noisy. Every command saves
    its JSON report under bench/results/raw/; `bench report` turns the latest ones into Markdown.
    """


# In the order `bench report` renders their reports (a command's name is the kind it saves).
COMMANDS = (decode, prefill, batched, roofline, ops, eval_, awq, prune, lora, awq_cost, arm, serve)
for command in COMMANDS:
    main.add_command(command)


@main.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the Markdown here instead of stdout.")
def report(files, out):
    """Render saved results as Markdown tables: the given JSON FILES in order, or else the latest
    result of each kind (of each development model) under bench/results/raw/."""
    reports = [results.load(f) for f in files] or [r for c in COMMANDS for r in results.latest_each(c.name)]
    if not reports:
        raise click.ClickException(f"no saved results under {results.RESULTS_DIR / 'raw'}: run a bench command first")
    text = "\n".join(tables.markdown(r.titled_table()) for r in reports)
    if out:
        out.write_text(text)
    else:
        click.echo(text)


if __name__ == "__main__":
    main()
