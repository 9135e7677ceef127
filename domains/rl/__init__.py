"""RL domain: CURL (SAC from pixels) on the DeepMind Control suite, rendered headless.

``RLDomain`` (``domain: rl`` in a recipe) owns its loop; the contrastive term is any core
objective. Modules, one idea each: ``envs`` (dm_control behind gymnasium, renderer choice,
frame stack, action repeat), ``augment`` (crops), ``replay`` (frames stored once),
``networks`` (encoder, actor, critic), ``curl`` (bilinear logits -> ContrastiveBatch),
``agent`` (one SAC + CURL update, top to bottom), ``evaluation``, ``workspace`` (the loop,
step accounting, snapshots), ``domain`` (recipe sections and ``run``).
"""

__all__ = ["RLDomain"]


def __getattr__(name: str):
    if name == "RLDomain":  # imported when first asked for: the domain's face answers without torch
        from domains.rl.domain import RLDomain

        return RLDomain
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
