"""Training objectives of seed 003 Appendix D for any family-"lm" model (RLT rows included).

    loss = pretraining_loss(model, tokens, lengths)           # eq. 23: every next token
    loss = masked_sequence_loss(logits, targets, mask)        # eq. 24: selected targets only (SFT)
    rollout = sample_rollout(model, prompts, 16)              # sample with the current policy, record log mu
    logp = replay_logprobs(model, rollout)                    # rebuild the state from H_0 under current weights
    loss = policy_gradient_loss(logp, rollout, rewards)       # eqs. 25-27

Every objective runs the model over the whole token history: masking selects loss terms, it never skips a
state update (§2.8, D.2), so gradients from the selected targets flow back through the unselected tokens too.
Examples are normalised by their own number of targets and then averaged (Appendix F.3 step 4): averaging
over tokens instead would weight long answers more.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..eval.sequence import per_example_loss
from ..infer.decode import SamplingPolicy, decode_loop


# --- supervised ---------------------------------------------------------------------------------------
def masked_sequence_loss(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 24: per-example mean over selected targets, averaged over the examples that have at least one."""
    per_row, counts = per_example_loss(logits, targets, mask)
    has_targets = counts > 0
    if not bool(has_targets.any()):  # nothing selected: a zero that still has a graph, so backward works
        return logits.sum() * 0.0
    return per_row[has_targets].mean()


def masked_terms_loss(terms: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 24's averaging of any per-position loss terms (batch, length) (a model's own objective, e.g.
    exit_gate_loop's): per-example mean over selected positions, averaged over examples that have one."""
    mask = mask.to(terms.device)
    counts = mask.sum(1)
    has_targets = counts > 0
    if not bool(has_targets.any()):  # nothing selected: a zero that still has a graph, so backward works
        return terms.sum() * 0.0
    per_row = torch.where(mask, terms, 0.0).sum(1) / counts.clamp(min=1)
    return per_row[has_targets].mean()


def pretraining_loss(model, tokens: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 23: next-token cross-entropy on every non-BOS target, (1 / (S - 1)) per sequence, then averaged.

    tokens (batch, S) start with BOS; `lengths` marks the real length of padded rows (padding is neither a
    target nor, being after the row's end, able to influence its targets)."""
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    mask = torch.ones_like(targets, dtype=torch.bool)
    if lengths is not None:
        mask = torch.arange(targets.shape[1], device=tokens.device)[None] < (lengths.to(tokens.device)[:, None] - 1)
    return masked_sequence_loss(model(inputs), targets, mask)


def sft_loss(model, tokens: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Eq. 24 from a model: the whole row goes through the model (every token updates the state)."""
    return masked_sequence_loss(model(tokens), targets, mask)


# --- policy gradients with replay (Appendix D.3, F.4) ------------------------------------------------------
@dataclass
class Rollout:
    """What the sampler hands the trainer (F.4 step 1)."""

    tokens: torch.Tensor  # (batch, prompt + new) the consumed history: prompt, then the sampled actions
    action_mask: torch.Tensor  # (batch, prompt + new) True where the policy sampled the token
    behaviour_logprobs: torch.Tensor  # (batch, prompt + new) log mu(token | history) at actions, 0 elsewhere
    temperature: float  # the sampling transform mu includes (eq. 27 needs the *actual* behaviour policy)


@torch.no_grad()
def sample_rollout(model, prompts: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                   generator: torch.Generator | None = None, stop_token: int | None = None,
                   pad_token: int = 0) -> Rollout:
    """Sample responses with the current policy through the incremental state, recording log mu.

    mu = softmax(logits / temperature) with no truncation, so every action the target policy can take has
    positive behaviour probability (D.3's support condition). After `stop_token` a row is finished: it is
    padded with `pad_token`, which is not an action."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for a stochastic behaviour policy, got {temperature}")
    was_training = model.training
    model.eval()
    batch, prompt_length = prompts.shape
    state = model.init_state(batch)
    logits = model.decode(prompts, state)[:, -1]
    out = decode_loop(model, state, logits, max_new_tokens, SamplingPolicy(temperature), generator=generator,
                      stop_token=stop_token, pad_token=pad_token, record_log_probs=True)
    model.train(was_training)
    before = torch.zeros(batch, prompt_length, device=prompts.device)  # the prompt holds no actions
    return Rollout(torch.cat((prompts, out.tokens), 1), torch.cat((before.bool(), out.actions), 1),
                   torch.cat((before, out.log_probs), 1), temperature)


def replay_logprobs(model, rollout: Rollout) -> torch.Tensor:
    """log p_Theta of every consumed token given its history, (batch, prompt + new), 0 at position 0.

    F.4 steps 2-4: the history is replayed from H_0 = (s*, empty) under the *current* parameters, with
    gradients (no detached prompt state: full BPTT reaches the prompt's encoder memory, SWA KV and feedback).
    Token j is predicted from the state after token j-1, so the logits are shifted by one. The target policy
    is the raw model (temperature 1), as eq. 27 states."""
    tokens = rollout.tokens
    logits = model(tokens[:, :-1])
    logp = F.log_softmax(logits.float(), dim=-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return F.pad(logp, (1, 0))


def leave_one_out_baseline(rewards: torch.Tensor) -> torch.Tensor:
    """b for each sample = mean reward of the *other* samples of the same prompt (rewards (prompts, samples)
    or (samples,)): independent of the sample's own response, as eq. 26 requires."""
    flat = rewards.dim() == 1
    r = rewards[None] if flat else rewards
    n = r.shape[-1]
    if n < 2:
        return torch.zeros_like(rewards)
    b = (r.sum(-1, keepdim=True) - r) / (n - 1)
    return b[0] if flat else b


def policy_gradient_loss(logprobs: torch.Tensor, rollout: Rollout, rewards: torch.Tensor, *,
                         baseline: torch.Tensor | None = None, surrogate: str = "trajectory",
                         clip: float = 0.2) -> tuple[torch.Tensor, dict]:
    """A loss whose gradient is the policy gradient of eqs. 26-27, and diagnostics.

    logprobs: replay_logprobs(model, rollout); rewards (batch,) sequence rewards R(c, y); baseline (batch,)
    response-independent b(c) (default: leave-one-out mean over the batch).
      trajectory  exact trajectory importance sampling (D.3): -(R - b) * prod_i r_i, with
                  r_i = exp(log p_Theta(y_i) - log mu(y_i)). Its gradient is (R - b) prod r_i sum grad log p,
                  which equals eq. 26 when the parameters are those that sampled (all r_i = 1).
      reinforce   eq. 26 as written: -(R - b) * sum_i log p_i. Unbiased only on-policy (first update).
      token_clip  tokenwise clipped surrogate, mean over actions of min(r A, clip(r, 1 - c, 1 + c) A).
                  The paper warns that tokenwise clipping may introduce bias; offered for comparison.
    Only tokens the policy sampled carry factors (Appendix E: user and tool tokens have no ratio)."""
    mask = rollout.action_mask.to(logprobs.device)
    behaviour = rollout.behaviour_logprobs.to(logprobs.device)
    rewards = rewards.to(logprobs.device, dtype=logprobs.dtype)
    if baseline is None:
        baseline = leave_one_out_baseline(rewards)
    advantage = (rewards - baseline).detach()  # b is held constant in the gradient (eq. 26)
    log_ratio = (logprobs - behaviour) * mask
    if surrogate == "trajectory":
        sequence_ratio = log_ratio.sum(1).exp()
        loss = -(advantage * sequence_ratio).mean()
    elif surrogate == "reinforce":
        loss = -(advantage * (logprobs * mask).sum(1)).mean()
        sequence_ratio = log_ratio.sum(1).exp().detach()
    elif surrogate == "token_clip":
        ratio = log_ratio.exp()
        a = advantage[:, None]
        per_token = torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a) * mask
        loss = -(per_token.sum() / mask.sum().clamp(min=1))
        sequence_ratio = log_ratio.sum(1).exp().detach()
    else:
        raise ValueError(f"unknown surrogate {surrogate!r} (known: trajectory, reinforce, token_clip)")
    stats = {"mean_reward": float(rewards.mean()), "mean_sequence_ratio": float(sequence_ratio.detach().mean()),
             "max_abs_log_ratio": float(log_ratio.detach().abs().max()) if mask.any() else 0.0,
             "actions": int(mask.sum())}
    return loss, stats


__all__ = ["Rollout", "leave_one_out_baseline", "masked_sequence_loss", "masked_terms_loss", "per_example_loss",
           "policy_gradient_loss", "pretraining_loss", "replay_logprobs", "sample_rollout", "sft_loss"]
