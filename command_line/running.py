"""The commands of one run: ``ctk run``, ``ctk show``, ``ctk export`` (click wiring; what they do
is commands.py's)."""

from __future__ import annotations

import sys

import click

from command_line.options import CLI, URI_HELP

__all__ = ["run", "show", "export"]


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False), required=False)
@click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe value (validated like the file)."
)
@click.option("--experiment", help="mlflow experiment name (tracking.experiment).")
@click.option("--seed", type=int, help="Random seed (seed).")
@click.option("--device", type=click.Choice(["cpu", "cuda", "auto"]), help="Device (default: the recipe's).")
@click.option(
    "--resume",
    "resume",
    metavar="RUN",
    help="Continue a killed run (its mlflow run id or a checkpoint file; RECIPE optional).",
)
@click.option("--extend", is_flag=True, help="With --resume: allow a changed budget (continue a run for longer).")
@click.option(
    "--precision", type=click.Choice(["fp32", "bf16", "fp16"]), help="Autocast precision (default: the recipe's)."
)
@click.option(
    "--nproc", type=int, default=1, show_default=True, help="Processes on this node (one per device) under torchrun."
)
@click.option(
    "--nnodes", type=int, default=1, show_default=True, help="Nodes of a multi-node run (each runs this command)."
)
@click.option("--node-rank", type=int, default=0, show_default=True, help="This node's rank in [0, --nnodes).")
@click.option("--master-addr", default="127.0.0.1", show_default=True, help="Address of node 0 (multi-node).")
@click.option("--master-port", type=int, default=29500, show_default=True, help="Free port on node 0 (multi-node).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option("--verbose", is_flag=True, help="End with every final metric (not only the metrics of record).")
def run(
    recipe: str | None,
    sets: tuple[str, ...],
    experiment: str | None,
    seed: int | None,
    device: str | None,
    resume: str | None,
    extend: bool,
    precision: str | None,
    nproc: int,
    nnodes: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    quiet: bool,
    verbose: bool,
) -> None:
    """Run RECIPE and log it to mlflow (or continue a run with --resume RUN_ID).

    \b
    Example:
      ctk run recipes/vision/quickstart.yaml --set budget.epochs=2 --seed 1
      ctk run --resume 3f2a...c1
      ctk run recipes/vision/quickstart.yaml --precision bf16 --nproc 2
    """
    import commands

    extra = commands.overrides(seed, experiment, precision)
    if nproc > 1 or nnodes > 1:
        sys.exit(
            commands.relaunch(
                recipe,
                sets,
                extra,
                str(CLI),
                nproc=nproc,
                nnodes=nnodes,
                node_rank=node_rank,
                master_addr=master_addr,
                master_port=master_port,
                device=device,
                resume=resume,
                extend=extend,
                quiet=quiet,
            )
        )
    text = commands.run(recipe, sets, extra, device=device, resume=resume, extend=extend, quiet=quiet, verbose=verbose)
    if text is not None:
        click.echo(text)


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
def show(recipe: str, sets: tuple[str, ...]) -> None:
    """Print RECIPE validated and fully resolved (every default filled in).

    \b
    Example:
      ctk show recipes/vision/quickstart.yaml --set objective.loss.temperature=0.2
    """
    import commands

    click.echo(commands.show(recipe, sets))


@click.command()
@click.argument("run")
@click.option("--out", type=click.Path(dir_okay=False), help="File to write (default: encoder-RUN.pt).")
@click.option("--uri", help=URI_HELP)
def export(run: str, out: str | None, uri: str | None) -> None:
    """Write the trained encoder of RUN (a run id or an encoder file) as data: CPU tensors,
    the resolved recipe, no pickled code. Load it with domains.export.load_encoder.

    \b
    Example:
      ctk export 3f2a...c1 --out simclr.pt
    """
    import commands

    click.echo(commands.export(run, out, uri))
