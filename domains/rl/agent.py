"""SAC from pixels with CURL's contrastive term (Laskin et al., 2020, Alg. 1; Haarnoja et al., 2018).

One update, top to bottom (CURL's order; ``u`` counts updates):

1. **Critic.** ``y = r + gamma (1 - done) (min_i Q'_i(o', a') - alpha log pi(a'|o'))`` with
   ``a' ~ pi(.|o')`` and the target critic ``Q'``; minimise ``sum_i (Q_i(o, a) - y)^2``. The
   critic's loss trains the shared encoder.
2. **Actor and temperature** (every ``actor_update_every`` updates). The actor reads the
   critic's convolutional features *detached*; minimise ``alpha log pi(a|o) - min_i Q_i(o, a)``,
   ``a ~ pi(.|o)``, then ``alpha (-log pi - H_target)`` with ``H_target = -|A|``.
3. **Targets** (every ``target_update_every`` updates). EMA ``theta' <- tau theta + (1 - tau)
   theta'``: ``critic_tau`` for the Q heads, ``encoder_tau`` for the key (target) encoder.
4. **Contrastive term.** Anchor ``z_a = f(o)`` (online encoder, gradient), key ``z_pos =
   f'(o_pos)`` (target encoder after step 3, no gradient) of a second random crop; the
   objective scores ``z_a W z_pos^T`` (see :mod:`domains.rl.curl`) and its loss trains the
   encoder and ``W``.

What is shared and why it is the same computation: the critic step changes the encoder, so
step 1 encodes ``o`` on its own; steps 2 and 4 both need the convolutional features of ``o``
and their critic projection under the *updated* encoder (the actor step touches neither), so
they are computed once and shared (detached for the actor, with gradient for step 4), and
the actor's backward computes only the actor's gradients (the reference also computes the
critic's there and discards them). The reference code encodes ``o`` three times there.
``fused=False`` keeps the reference's separate passes (for the benchmark and the equivalence
test). :meth:`CurlSacAgent._encode_obs` is the one place the two paths part
(:class:`_SharedPass` or :class:`_SeparatePasses`); each step is its own method.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from domains.rl.augment import center_crop
from domains.rl.config import AgentConfig, EncoderConfig
from domains.rl.curl import BilinearCURL
from domains.rl.networks import Actor, Critic, PixelEncoder, full_precision
from toolkit.losses.base import ContrastiveBatch
from toolkit.objective import Objective

__all__ = ["CurlSacAgent", "soft_update"]


@torch.no_grad()
def soft_update(online: nn.Module, target: nn.Module, tau: float) -> None:
    """``target <- tau * online + (1 - tau) * target``, parameter by parameter."""
    for p, tp in zip(online.parameters(), target.parameters()):
        tp.lerp_(p, tau)


class CurlSacAgent(nn.Module):
    """SAC + CURL. ``objective`` is the core objective built from the recipe (``None``:
    plain pixel SAC, no contrastive term). ``fused=False`` and ``channels_last=False``
    reproduce the reference code's separate encoder passes, per-parameter Adam loops and NCHW
    layout (benchmarks); ``fused=True`` shares the encoder pass, fuses each ReLU into its
    convolution on CPU (:func:`~domains.rl.networks.conv_relu`) and uses PyTorch's fused Adam
    (the same update rule in one kernel per optimizer step). ``compute_dtype=torch.bfloat16``
    (``precision: bf16``) runs the encoders' convolutions and the hidden layers of the actor
    and Q MLPs in bf16; the projections and their LayerNorms, the MLPs' output layers (Q
    values, policy mean and log-std), the targets, the losses, W and Adam stay fp32 (see
    :mod:`domains.rl.networks`)."""

    def __init__(
        self,
        obs_shape: tuple[int, int, int],
        action_dim: int,
        *,
        encoder: EncoderConfig,
        agent: AgentConfig,
        objective: Objective | None,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        fused: bool = True,
        channels_last: bool = True,
        compute_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        channels, size, _ = obs_shape
        self.cfg, self.fused, self.objective = agent, fused, objective
        self.crop_size, self.action_dim = size, action_dim
        self.critic = Critic(
            PixelEncoder(
                channels,
                size,
                encoder.feature_dim,
                encoder.num_layers,
                encoder.num_filters,
                channels_last,
                fuse_relu=fused,
                conv_dtype=compute_dtype,
            ),
            action_dim,
            agent.hidden_dim,
            compute_dtype,
        )
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor = Actor(
            self.critic.encoder.conv_dim,
            encoder.feature_dim,
            action_dim,
            agent.hidden_dim,
            agent.actor_log_std_range,
            compute_dtype,
        )
        self.critic.encoder.adopt_projection(self.actor.project)
        self.curl = BilinearCURL(encoder.feature_dim)
        if objective is not None:
            # the objective's own parts (a predictor for BYOL) on the encoder's features; the
            # target is CURL's key encoder (critic_target.encoder). Drawn from a forked random
            # state: every other network and the run's random stream stay as without them.
            with torch.random.fork_rng(devices=[]):
                objective.attach(self.critic.encoder, encoder.feature_dim, 1, own_target=False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(agent.init_temperature)))
        self.target_entropy = -float(action_dim)

        # The actor's optimizer holds only its projection and MLP: the shared convolutions
        # get no gradient from the actor (the reference ties them into the actor's
        # optimizer, where they never receive a gradient).
        adam = functools.partial(torch.optim.Adam, fused=fused)
        self.actor_opt = adam(self.actor.parameters(), lr=lr, betas=betas)
        self.critic_opt = adam(self.critic.parameters(), lr=lr, betas=betas)
        self.alpha_opt = adam([self.log_alpha], lr=agent.alpha_lr, betas=agent.alpha_betas)
        own = objective.trainable_parameters() if objective is not None else []  # a predictor
        self.contrastive_opt = adam([self.curl.W, *self.critic.encoder.parameters(), *own], lr=lr, betas=betas)
        self.encoder_opt = (
            adam(self.critic.encoder.parameters(), lr=lr, betas=betas) if agent.code_double_encoder_step else None
        )
        self.num_updates = 0
        self.timings: dict[str, float] = defaultdict(float)

    @property
    def alpha(self) -> Tensor:
        return self.log_alpha.exp()

    # -- acting ----------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: np.ndarray, *, sample: bool) -> np.ndarray:
        """Action for one stacked observation ``[3k, H, W]`` (centre-cropped here), computed in
        fp32 whatever the precision (see :func:`~domains.rl.networks.full_precision`)."""
        x = torch.from_numpy(np.ascontiguousarray(center_crop(obs, self.crop_size)))[None]
        with full_precision(self.critic.encoder, self.actor):
            mu, pi, _, _ = self.actor(self.critic.encoder.conv(x.to(self.log_alpha.device)), sample=sample)
        return (pi if sample else mu)[0].cpu().numpy()

    # -- one update ------------------------------------------------------------------------
    def update(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """One SAC + CURL update on a sampled batch (steps 1-4 of the module docstring, in
        CURL's order); returns detached scalars to log."""
        prepare = self.critic.encoder.prepare  # to float once: each batch is encoded 1-3 times
        obs, next_obs, obs_pos = prepare(batch["obs"]), prepare(batch["next_obs"]), prepare(batch["pos"])
        cfg, u, clock = self.cfg, self.num_updates, _Clock(self.timings)

        out = self._critic_step(obs, batch["action"], batch["reward"], next_obs, batch["not_done"])
        clock.lap("critic")
        contrast = self.objective is not None and cfg.contrastive_weight > 0
        actor_step = u % cfg.actor_update_every == 0
        obs_pass = self._encode_obs(obs, contrast, actor_step, clock)
        if actor_step:
            out.update(self._actor_and_temperature_step(obs_pass))
            clock.lap("actor")
        if u % cfg.target_update_every == 0:
            self._target_step()
            clock.lap("target")
        if contrast:
            out.update(self._contrastive_step(obs_pass.anchor(), obs_pos, u, obs))
            clock.lap("contrastive")

        out["alpha"] = self.alpha.detach()
        self.num_updates += 1
        return out

    def _encode_obs(
        self, obs: Tensor, contrast: bool, actor_step: bool, clock: _Clock
    ) -> _SharedPass | _SeparatePasses | None:
        """Where the fused and reference paths part: the encodings of ``obs`` that steps 2 and
        4 read, after the critic step. Fused: one shared pass (``None`` when neither step runs);
        reference: a fresh pass for every use."""
        if not self.fused:
            return _SeparatePasses(self.critic.encoder, obs)
        if not (contrast or actor_step):
            return None
        shared = _SharedPass(self.critic.encoder, obs, with_grad=contrast)
        clock.lap("shared_encoder")
        return shared

    def _critic_step(
        self, obs: Tensor, action: Tensor, reward: Tensor, next_obs: Tensor, not_done: Tensor
    ) -> dict[str, Tensor]:
        """Step 1: both Q heads towards the soft Bellman target; trains the shared encoder."""
        with torch.no_grad():
            _, next_action, next_log_pi, _ = self.actor(self.critic.encoder.conv(next_obs))
            target_q1, target_q2 = self.critic_target(next_obs, next_action)
            target_v = torch.min(target_q1, target_q2) - self.alpha.detach() * next_log_pi
            target_q = reward + not_done * self.cfg.discount * target_v
        q1, q2 = self.critic(obs, action)
        critic_loss = F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        return {"critic_loss": critic_loss.detach(), "q_mean": q1.detach().mean()}

    def _actor_and_temperature_step(self, obs_pass: _SharedPass | _SeparatePasses) -> dict[str, Tensor]:
        """Step 2: the actor on detached conv features against the critic's Q, then the
        temperature towards the target entropy."""
        _, pi, log_pi, log_std = self.actor(obs_pass.actor_features())
        actor_q1, actor_q2 = self.critic.heads(obs_pass.critic_features(), pi)
        actor_loss = (self.alpha.detach() * log_pi - torch.min(actor_q1, actor_q2)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        obs_pass.actor_backward(actor_loss, self.actor)
        self.actor_opt.step()
        alpha_loss = (self.alpha * (-log_pi - self.target_entropy).detach()).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        return {
            "actor_loss": actor_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "entropy": -log_pi.detach().mean(),
            "log_std": log_std.detach().mean(),
        }

    def _target_step(self) -> None:
        """Step 3: EMA of the target Q heads (``critic_tau``) and key encoder (``encoder_tau``;
        with an ``objective.projector`` and a target, the target's projector alike)."""
        soft_update(self.critic.q1, self.critic_target.q1, self.cfg.critic_tau)
        soft_update(self.critic.q2, self.critic_target.q2, self.cfg.critic_tau)
        soft_update(self.critic.encoder, self.critic_target.encoder, self.cfg.encoder_tau)
        objective = self.objective
        if objective is not None and objective.target_projector is not None and objective.projector is not None:
            objective.target_projector.update(objective.projector, 1 - self.cfg.encoder_tau)

    def _contrastive_step(self, z_anchor: Tensor, obs_pos: Tensor, step: int, obs: Tensor) -> dict[str, Tensor]:
        """Step 4: the objective on ``z_anchor W z_pos^T``, keys from the target encoder;
        trains the encoder and ``W``. A loss of the non-contrastive family (``two_branches``)
        gets the two crops' embeddings instead (:meth:`_two_branch_batch`)."""
        if self.objective.loss.two_branches:
            batch = self._two_branch_batch(z_anchor, obs_pos, obs, step)
        else:
            with torch.no_grad():
                z_pos = self.critic_target.encoder(obs_pos)
            batch = self.curl.batch(z_anchor, z_pos, step=step)
        result = self.objective(batch)
        self.contrastive_opt.zero_grad(set_to_none=True)
        if self.encoder_opt is not None:
            self.encoder_opt.zero_grad(set_to_none=True)
        (self.cfg.contrastive_weight * result.loss).backward()
        if self.encoder_opt is not None:
            self.encoder_opt.step()
        self.contrastive_opt.step()
        out = {"contrastive_loss": result.loss.detach()}
        for name, value in result.records.items():
            out[f"curl_{name}"] = torch.as_tensor(value).detach()
        return out

    def _two_branch_batch(self, z_anchor: Tensor, obs_pos: Tensor, obs: Tensor, step: int) -> ContrastiveBatch:
        """The non-contrastive family's batch: the online encoder's features of both crops as
        the two branches (``views``, both with gradient: Barlow Twins and VICReg hold them
        together) and, for a loss that compares with a target (BYOL), the key encoder's
        features of the same crops (``keys``, no gradient): CURL's momentum encoder is the
        target, updated by the agent's own step 3."""
        z_other = self.critic.encoder(obs_pos)
        keys = None
        if "keys" in self.objective.needs:
            with torch.no_grad():
                keys = torch.stack([self.critic_target.encoder(obs), self.critic_target.encoder(obs_pos)], dim=1)
        return ContrastiveBatch(views=torch.stack([z_anchor, z_other], dim=1), keys=keys, step=step)

    # -- snapshots -------------------------------------------------------------------------
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        opts = {
            "actor": self.actor_opt,
            "critic": self.critic_opt,
            "alpha": self.alpha_opt,
            "contrastive": self.contrastive_opt,
        }
        if self.encoder_opt is not None:
            opts["encoder"] = self.encoder_opt
        return opts

    def snapshot(self) -> dict:
        """Networks, optimizers and the update counter: the agent's part of the run's checkpoint
        (:meth:`domains.rl.workspace.Workspace.state_dict`; :meth:`restore` reads it back)."""
        return {
            "modules": self.state_dict(),
            "num_updates": self.num_updates,
            "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
        }

    def restore(self, state: dict) -> None:
        self.load_state_dict(state["modules"])
        self.num_updates = int(state["num_updates"])
        for name, opt in self.optimizers().items():
            opt.load_state_dict(state["optimizers"][name])


class _Clock:
    """Adds the wall time since the previous lap to ``timings[name]``."""

    def __init__(self, timings: dict[str, float]) -> None:
        self.timings, self.t = timings, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] += now - self.t
        self.t = now


class _SharedPass:
    """The fused path: the conv features of ``obs`` and their critic projection, computed once
    and shared by the actor step (detached) and the contrastive step (with gradient)."""

    def __init__(self, encoder: PixelEncoder, obs: Tensor, with_grad: bool) -> None:
        with torch.set_grad_enabled(with_grad):
            self.h = encoder.conv(obs)
            self.z = encoder.project(self.h)

    def actor_features(self) -> Tensor:
        return self.h.detach()

    def critic_features(self) -> Tensor:
        return self.z.detach()

    def anchor(self) -> Tensor:
        return self.z

    @staticmethod
    def actor_backward(loss: Tensor, actor: nn.Module) -> None:
        """Only the actor's gradients (the critic's would be discarded)."""
        params = list(actor.parameters())
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g


class _SeparatePasses:
    """The reference path: ``obs`` encoded afresh for every use, as CURL's code does."""

    def __init__(self, encoder: PixelEncoder, obs: Tensor) -> None:
        self.encoder, self.obs = encoder, obs

    def actor_features(self) -> Tensor:
        return self.encoder.conv(self.obs).detach()

    def critic_features(self) -> Tensor:
        return self.encoder.project(self.encoder.conv(self.obs).detach())

    def anchor(self) -> Tensor:
        return self.encoder(self.obs)

    @staticmethod
    def actor_backward(loss: Tensor, actor: nn.Module) -> None:
        loss.backward()
