"""``ctk data``: the offline datasets of the installed domains (list | fetch NAME... | fetch
default | fetch all | path NAME | verify [NAME...]). Progress goes to stderr; ``path`` prints only
the folder on stdout, so ``$(ctk data path austen)`` works in scripts. ``--root`` is taken
before or after the sub-command (default: ``$CTK_DATA``, else ``./data``). What each does is
``commands.data_*``'s."""

from __future__ import annotations

import click

__all__ = ["data"]

ROOT_HELP = "Data root (default: $CTK_DATA, else ./data)."


def _root(ctx: click.Context, root: str | None) -> str | None:
    """The sub-command's --root, else the group's."""
    return root or ctx.obj


@click.group()
@click.option("--root", help=ROOT_HELP)
@click.pass_context
def data(ctx: click.Context, root: str | None) -> None:
    """Offline datasets: list | fetch NAME... | fetch default | path NAME | verify [NAME...].

    \b
    Example:
      ctk data fetch default      (what the default recipes and tests need)
      ctk data list               (every dataset, source, licence, size, state)
    """
    ctx.obj = root


@data.command("list")
@click.option("--root", help=ROOT_HELP)
@click.pass_context
def list_(ctx: click.Context, root: str | None) -> None:
    """Every dataset, its source, licence, size and state."""
    import commands

    click.echo(commands.data_list(_root(ctx, root)))


@data.command()
@click.argument("names", nargs=-1, required=True)
@click.option("--force", is_flag=True, help="Fetch again even if installed.")
@click.option("--root", help=ROOT_HELP)
@click.pass_context
def fetch(ctx: click.Context, names: tuple[str, ...], force: bool, root: str | None) -> None:
    """Install datasets ('default', 'all' or names)."""
    import commands

    commands.data_fetch(names, _root(ctx, root), force=force)


@data.command()
@click.argument("name")
@click.option("--root", help=ROOT_HELP)
@click.pass_context
def path(ctx: click.Context, name: str, root: str | None) -> None:
    """Print the folder of an installed dataset."""
    import commands

    click.echo(commands.data_path(name, _root(ctx, root)))


@data.command()
@click.argument("names", nargs=-1)
@click.option("--root", help=ROOT_HELP)
@click.pass_context
def verify(ctx: click.Context, names: tuple[str, ...], root: str | None) -> None:
    """Re-hash installed datasets (default: all installed)."""
    import commands

    commands.data_verify(names, _root(ctx, root))
