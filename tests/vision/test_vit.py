"""The ViT encoders (``domains/vision/vit.py``): shapes, torchvision's forward pass at the configured
size, other input sizes through resampled position embeddings, gradients, the recipe keys and
their refusals, and a ViT recipe training for two steps."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from domains.vision import VisionDomain
from domains.vision.encoders import ProjectionHead, VisionEncoder, build_backbone
from domains.vision.vit import VIT_CONFIGS, ViTBackbone, default_patch_size
from tests.vision.test_domain import BASE, train_steps
from toolkit import objective as objective_mod
from toolkit import recipe as rc


@pytest.mark.parametrize("arch,dim", [("vit_tiny", 192), ("vit_small", 384), ("vit_base", 768)])
def test_configurations_and_feature_size(arch, dim):
    backbone, feat = build_backbone(arch, 3, 32, patch_size=4, depth=1)
    hidden, layers, heads, mlp = VIT_CONFIGS[arch]
    vit = backbone.vit
    assert feat == dim == hidden and vit.hidden_dim == hidden and vit.mlp_dim == mlp
    assert len(vit.encoder.layers) == 1 and vit.encoder.layers[0].self_attention.num_heads == heads
    assert vit.encoder.pos_embedding.shape == (1, 1 + 8 * 8, dim)  # 32 / 4 = 8 patches a side
    assert layers == 12 and len(ViTBackbone("vit_tiny", 3, 32, 4).vit.encoder.layers) == 12
    with torch.no_grad():
        assert backbone.eval()(torch.randn(2, 3, 32, 32)).shape == (2, dim)


def test_any_number_of_channels_and_the_projection():
    torch.manual_seed(0)
    backbone, dim = build_backbone("vit_tiny", 1, 28, patch_size=4, depth=2)
    conv = backbone.vit.conv_proj
    assert conv.in_channels == 1 and conv.kernel_size == (4, 4) and conv.stride == (4, 4)
    assert float(conv.bias.detach().abs().max()) == 0.0  # initialised as torchvision initialises its own
    assert abs(float(conv.weight.detach().std()) - (1 / 16) ** 0.5) < 0.1 * (1 / 16) ** 0.5
    enc = VisionEncoder(backbone, ProjectionHead(dim, [32], 16))
    x = torch.randn(4, 1, 28, 28)
    z = enc(x)
    assert z.shape == (4, 16) and torch.allclose(z.norm(dim=1), torch.ones(4), atol=1e-5)
    assert enc.features(x).shape == (4, 192)


def test_the_configured_size_is_torchvisions_forward():
    """At the configured size nothing is resampled: the class token equals what torchvision's own
    forward pass gives (its classification head left out)."""
    torch.manual_seed(1)
    for channels, size, patch in ((3, 32, 4), (1, 28, 4), (1, 20, 2)):
        backbone = ViTBackbone("vit_tiny", channels, size, patch, depth=2).eval()
        x = torch.randn(3, channels, size, size)
        with torch.no_grad():
            assert torch.equal(backbone(x), backbone.vit(x))
        assert backbone.position_embedding(size // patch, size // patch) is backbone.vit.encoder.pos_embedding


def test_another_input_size_resamples_the_position_embeddings():
    torch.manual_seed(2)
    backbone = ViTBackbone("vit_tiny", 3, 32, 4, depth=2).eval()
    with pytest.raises(AssertionError):  # what torchvision's forward does with a local crop
        backbone.vit(torch.randn(2, 3, 16, 16))
    for size in (12, 16, 48):
        with torch.no_grad():
            out = backbone(torch.randn(2, 3, size, size))
        assert out.shape == (2, 192) and torch.isfinite(out).all()
    # the patch grid's embeddings resampled bicubically from 8x8 to 3x3; the class token's kept
    pos = backbone.vit.encoder.pos_embedding
    grid = pos[:, 1:].reshape(1, 8, 8, 192).permute(0, 3, 1, 2)
    ref = F.interpolate(grid, size=(3, 3), mode="bicubic", align_corners=False).permute(0, 2, 3, 1).reshape(1, 9, 192)
    got = backbone.position_embedding(3, 3)
    assert got.shape == (1, 10, 192) and torch.equal(got[:, :1], pos[:, :1]) and torch.allclose(got[:, 1:], ref)
    # a batch of local crops is the same computation as torchvision's, on the resampled table
    x = torch.randn(2, 3, 12, 12)
    vit = backbone.vit
    tokens = torch.cat([vit.class_token.expand(2, -1, -1), vit.conv_proj(x).flatten(2).transpose(1, 2)], dim=1)
    with torch.no_grad():
        expect = vit.encoder.ln(vit.encoder.layers(tokens + got))[:, 0]
        assert torch.allclose(backbone(x), expect, atol=1e-6)
    with pytest.raises(ValueError, match="multiples of the patch size 4"):
        backbone(torch.randn(2, 3, 14, 14))


def test_gradients_reach_every_parameter():
    torch.manual_seed(3)
    backbone, dim = build_backbone("vit_tiny", 3, 32, patch_size=4, depth=2)
    enc = VisionEncoder(backbone, ProjectionHead(dim, [32], 16))
    for size in (32, 12):  # the configured size, and a local crop through the resampled table
        enc.zero_grad()
        enc(torch.randn(4, 3, size, size)).pow(2).sum().backward()
        missing = [name for name, p in enc.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        assert not missing, (size, missing)


def test_patch_size_default_and_refusals():
    assert default_patch_size(28) == default_patch_size(32) == 4 and default_patch_size(224) == 16
    assert ViTBackbone("vit_tiny", 3, 224, depth=1).patch_size == 16
    with pytest.raises(ValueError, match=r"multiple of encoder.patch_size \(4\), got 30"):
        ViTBackbone("vit_tiny", 3, 30, 4, depth=1)
    with pytest.raises(ValueError, match="ViT arch must be one of"):
        ViTBackbone("vit_huge", 3, 32)


def _raw(fmnist_root, **encoder):
    raw = copy.deepcopy(BASE)
    raw["data"]["root"] = str(fmnist_root)
    raw["encoder"] = {
        "arch": "vit_tiny",
        "depth": 1,
        "patch_size": 4,
        "head": {"hidden": [16], "out_dim": 8},
        **encoder,
    }
    return raw


def _validate(raw):
    return rc.validate(raw, VisionDomain.sections(), objective_mod.check, domain_check=VisionDomain.check)


def test_recipe_refusals_name_the_key(fmnist_root):
    raw = _raw(fmnist_root, patch_size=8)  # 28 px views
    with pytest.raises(rc.RecipeError, match=r"data.augment.size: the view size of vit_tiny must be a multiple"):
        _validate(raw)
    raw = _raw(fmnist_root)
    raw["evaluation"] = {**raw["evaluation"], "image_size": 30}
    with pytest.raises(rc.RecipeError, match=r"evaluation.image_size: with vit_tiny must be a multiple .*got 30"):
        _validate(raw)
    raw = copy.deepcopy(BASE)
    raw["encoder"] = {**raw["encoder"], "patch_size": 4, "depth": 2}
    with pytest.raises(rc.RecipeError, match=r"encoder.patch_size: applies to vit_tiny") as err:
        _validate(raw)
    assert "encoder.depth: applies to" in str(err.value)
    with pytest.raises(rc.RecipeError, match="encoder.arch"):
        _validate(_raw(fmnist_root, arch="vit_huge"))


def test_a_vit_recipe_trains_two_steps(fmnist_root):
    recipe = _validate(_raw(fmnist_root))
    assert recipe.encoder.arch == "vit_tiny" and recipe.encoder.depth == 1
    dom, _, enc, _, seen = train_steps(recipe)
    assert isinstance(enc.backbone, ViTBackbone) and len(enc.backbone.vit.encoder.layers) == 1
    assert len(seen) == 2 and all(torch.isfinite(out.loss) for *_, out in seen)
    torch.manual_seed(recipe.seed)  # the untrained twin, built as train_steps built it
    fresh = VisionDomain(recipe)
    fresh.build_data(recipe)
    start = dict(fresh.build_encoder(recipe).named_parameters())
    still = [k for k, p in enc.named_parameters() if torch.equal(p.detach(), start[k].detach())]
    assert not still, still  # every parameter learned, the position embeddings and the class token too
