"""The typer application every command module registers on, and the version option."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from preflight import VERSION

app = typer.Typer(
    name="preflight",
    help="Cluster preflight and diagnostics for GPU training clusters: is this allocation fit to train on?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_help_option=False,  # its own --help below: a plain bool flag, which typer does not coerce
)


def _help(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        sys.stdout.write(ctx.get_help() + "\n")
        raise typer.Exit(0)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"preflight {VERSION}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
    show_help: Annotated[bool, typer.Option("--help", callback=_help, is_eager=True, expose_value=False,
                                            help="Show this message and exit.")] = False,
) -> None:
    """Cluster preflight and diagnostics for GPU training clusters."""
