"""The recipe's ``distributed`` section and the launcher's command lines (no process started)."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner
from torch import nn

import cli
from toolkit import recipe as rc
from toolkit.training.distributed import Context, torchrun_command

QUICKSTART = "recipes/vision/quickstart.yaml"


def test_show_validates_the_distributed_section():
    runner = CliRunner()
    ok = runner.invoke(cli.main, ["show", QUICKSTART, "--set", "distributed.shuffle_bn=true"])
    assert ok.exit_code == 0, ok.output
    assert "distributed:\n  sync_bn: false\n  shuffle_bn: true" in ok.output
    bad = runner.invoke(cli.main, ["show", QUICKSTART, "--set", "distributed.sync_bn=maybe"])
    assert bad.exit_code == 2 and "distributed.sync_bn" in bad.output and "maybe" in bad.output


def test_the_old_misnamed_key_is_gone():
    result = CliRunner().invoke(cli.main, ["show", QUICKSTART, "--set", "objective.negatives.shuffle_bn=true"])
    assert result.exit_code == 2
    assert "objective.negatives.shuffle_bn: unknown key" in result.output
    assert "shuffle_bn" not in rc.Negatives.model_fields


def test_sync_bn_on_cpu_is_refused_with_the_key():
    ctx = Context(rank=0, world_size=2, local_rank=0, device=torch.device("cpu"))
    with pytest.raises(ValueError, match=r"distributed.sync_bn: true needs CUDA"):
        ctx.wrap(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)), sync_bn=True)


def test_torchrun_command_lines():
    one = torchrun_command(2, "cli.py", ["run", "r.yaml"])
    assert one[3:] == ["--standalone", "--nproc-per-node=2", "cli.py", "run", "r.yaml"]
    two = torchrun_command(
        1, "cli.py", ["run", "r.yaml"], nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29501
    )
    assert two[3:7] == ["--nnodes=2", "--node-rank=1", "--master-addr=10.0.0.1", "--master-port=29501"]
    with pytest.raises(ValueError, match="node rank 2 of 2"):
        torchrun_command(1, "cli.py", [], nnodes=2, node_rank=2)
