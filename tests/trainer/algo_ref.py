#!/usr/bin/env python3
"""algo_ref.py: a stdlib transcription of verl's RL formulas, on verl's own padded (bs, L) layout
with a response mask, writing the golden values test_algo.c checks vr_algo.c against.

Transcribed from verl v0.7.1 (github.com/verl-project/verl, tag v0.7.1):
  verl/trainer/ppo/core_algos.py   compute_gae_advantage_return, compute_grpo_outcome_advantage,
                                   compute_rloo_outcome_advantage,
                                   compute_reinforce_plus_plus_outcome_advantage, agg_loss,
                                   compute_policy_loss_vanilla, compute_value_loss,
                                   kl_penalty_forward, AdaptiveKLController
  verl/utils/torch_functional.py   masked_sum, masked_mean, masked_var, masked_whiten,
                                   clip_by_value
  verl/trainer/ppo/ray_trainer.py  apply_kl_penalty
Each function below keeps verl's loop structure and masks (padding positions included), so the
test also shows that vr_algo's packed layout (response tokens only) gives verl's numbers.

usage: algo_ref.py OUT.json      (the committed tests/fixtures/algo/golden.json)
"""
import json
import math
import random
import sys


def masked_sum(v, m):
    return sum(x * k for row, mr in zip(v, m) for x, k in zip(row, mr) if k)


def masked_mean(v, m):
    return masked_sum(v, m) / (sum(sum(r) for r in m) + 1e-8)


def masked_var(v, m):
    mean = masked_mean(v, m)
    c = [[(x - mean) ** 2 for x in row] for row in v]
    var = masked_mean(c, m)
    s = sum(sum(r) for r in m)
    assert s > 1
    return var * (s / (s - 1))


def masked_whiten(v, m):
    mean, var = masked_mean(v, m), masked_var(v, m)
    return [[(x - mean) / math.sqrt(var + 1e-8) for x in row] for row in v]


def gae(rewards, values, mask, gamma, lam):
    bs, L = len(rewards), len(rewards[0])
    nextvalues = [0.0] * bs
    lastgaelam = [0.0] * bs
    rev = []
    for t in reversed(range(L)):
        col = []
        for b in range(bs):
            delta = rewards[b][t] + gamma * nextvalues[b] - values[b][t]
            lg = delta + gamma * lam * lastgaelam[b]
            nextvalues[b] = values[b][t] * mask[b][t] + (1 - mask[b][t]) * nextvalues[b]
            lastgaelam[b] = lg * mask[b][t] + (1 - mask[b][t]) * lastgaelam[b]
            col.append(lastgaelam[b])
        rev.append(col)
    adv = [[rev[L - 1 - t][b] for t in range(L)] for b in range(bs)]
    ret = [[adv[b][t] + values[b][t] for t in range(L)] for b in range(bs)]
    return masked_whiten(adv, mask), ret


def std_unbiased(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def grpo(rewards, mask, index, eps, norm):
    scores = [sum(r) for r in rewards]
    groups = {}
    for i, g in enumerate(index):
        groups.setdefault(g, []).append(scores[i])
    out = []
    for i, g in enumerate(index):
        if len(groups[g]) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = sum(groups[g]) / len(groups[g]), std_unbiased(groups[g])
        out.append((scores[i] - mean) / (std + eps) if norm else scores[i] - mean)
    return [[out[b] * mask[b][t] for t in range(len(mask[0]))] for b in range(len(mask))]


def rloo(rewards, mask, index):
    scores = [sum(r) for r in rewards]
    groups = {}
    for i, g in enumerate(index):
        groups.setdefault(g, []).append(scores[i])
    out = []
    for i, g in enumerate(index):
        n = len(groups[g])
        mean = 0.0 if n == 1 else sum(groups[g]) / n
        out.append(scores[i] * n / (n - 1) - mean * n / (n - 1) if n > 1 else scores[i])
    return [[out[b] * mask[b][t] for t in range(len(mask[0]))] for b in range(len(mask))]


def reinforce_pp(rewards, mask, gamma):
    bs, L = len(rewards), len(rewards[0])
    ret = [[0.0] * L for _ in range(bs)]
    running = [0.0] * bs
    for t in reversed(range(L)):
        for b in range(bs):
            running[b] = rewards[b][t] + gamma * running[b]
            ret[b][t] = running[b]
            running[b] = running[b] * mask[b][t]
    adv = masked_whiten(ret, mask)
    adv = [[adv[b][t] * mask[b][t] for t in range(L)] for b in range(bs)]
    return adv, ret


def clamp(x, lo, hi):
    return max(lo, min(hi, x))


def kl_forward(lp, ref, kind):
    if kind in ("kl", "k1"):
        return lp - ref
    if kind == "abs":
        return abs(lp - ref)
    if kind in ("mse", "k2"):
        return 0.5 * (lp - ref) ** 2
    if kind in ("low_var_kl", "k3"):
        kl = clamp(ref - lp, -20, 20)
        return clamp(math.exp(kl) - kl - 1, -10, 10)
    raise ValueError(kind)


def agg_loss(mat, mask, mode, horizon=None):
    if mode == "token-mean":
        return masked_sum(mat, mask) / sum(sum(r) for r in mask)
    seq_tok = [sum(x * k for x, k in zip(row, mr)) for row, mr in zip(mat, mask)]
    cnt = [sum(mr) for mr in mask]
    seq_mask = [1.0 if c > 0 else 0.0 for c in cnt]
    gbs = sum(seq_mask)
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        loss = sum(s * k for s, k in zip(seq_tok, seq_mask)) / gbs
        if mode == "seq-mean-token-sum-norm":
            loss /= horizon if horizon is not None else len(mask[0])
        return loss
    if mode == "seq-mean-token-mean":
        seq = [s / (c + 1e-8) for s, c in zip(seq_tok, cnt)]
        return sum(s * k for s, k in zip(seq, seq_mask)) / gbs
    raise ValueError(mode)


def policy_loss(old, lp, adv, mask, lo, hi, c, mode):
    bs, L = len(lp), len(lp[0])
    nkl = [[clamp(lp[b][t] - old[b][t], -20.0, 20.0) for t in range(L)] for b in range(bs)]
    ratio = [[math.exp(x) for x in row] for row in nkl]
    ppo_kl = masked_mean([[-x for x in row] for row in nkl], mask)
    l1 = [[-adv[b][t] * ratio[b][t] for t in range(L)] for b in range(bs)]
    l2 = [[-adv[b][t] * clamp(ratio[b][t], 1 - lo, 1 + hi) for t in range(L)] for b in range(bs)]
    c1 = [[max(l1[b][t], l2[b][t]) for t in range(L)] for b in range(bs)]
    clipfrac = masked_mean([[1.0 if l2[b][t] > l1[b][t] else 0.0 for t in range(L)] for b in range(bs)], mask)
    l3 = [[-adv[b][t] * c for t in range(L)] for b in range(bs)]
    c2 = [[min(l3[b][t], c1[b][t]) for t in range(L)] for b in range(bs)]
    clip_lower = masked_mean([[1.0 if (c1[b][t] > l3[b][t] and adv[b][t] < 0) else 0.0 for t in range(L)]
                              for b in range(bs)], mask)
    pg = [[c2[b][t] if adv[b][t] < 0 else c1[b][t] for t in range(L)] for b in range(bs)]
    return agg_loss(pg, mask, mode), clipfrac, ppo_kl, clip_lower


def value_loss(vpreds, returns, values, mask, cv, mode):
    bs, L = len(vpreds), len(vpreds[0])
    # clip_by_value(x, min, max) = torch.max(torch.min(x, max), min)
    vc = [[max(min(vpreds[b][t], values[b][t] + cv), values[b][t] - cv) for t in range(L)] for b in range(bs)]
    l1 = [[(vpreds[b][t] - returns[b][t]) ** 2 for t in range(L)] for b in range(bs)]
    l2 = [[(vc[b][t] - returns[b][t]) ** 2 for t in range(L)] for b in range(bs)]
    mx = [[max(l1[b][t], l2[b][t]) for t in range(L)] for b in range(bs)]
    return 0.5 * agg_loss(mx, mask, mode), masked_mean(
        [[1.0 if l2[b][t] > l1[b][t] else 0.0 for t in range(L)] for b in range(bs)], mask)


class AdaptiveKLController:
    def __init__(self, init_kl_coef, target_kl, horizon):
        self.value, self.target, self.horizon = init_kl_coef, target_kl, horizon

    def update(self, current_kl, n_steps):
        e = clamp(current_kl / self.target - 1, -0.2, 0.2)
        self.value *= 1 + e * n_steps / self.horizon


def apply_kl_penalty(scores, old, ref, mask, kind, beta):
    """token_level_rewards and current_kl (mean over sequences of the per-sequence masked mean)."""
    bs, L = len(scores), len(scores[0])
    kld = [[kl_forward(old[b][t], ref[b][t], kind) * mask[b][t] for t in range(L)] for b in range(bs)]
    rew = [[scores[b][t] - beta * kld[b][t] for t in range(L)] for b in range(bs)]
    per = [sum(kld[b][t] * mask[b][t] for t in range(L)) / (sum(mask[b]) + 1e-8) for b in range(bs)]
    return rew, sum(per) / bs


def packed(mat, mask):
    return [x for row, mr in zip(mat, mask) for x, k in zip(row, mr) if k]


def main():
    rng = random.Random(20261201)
    lens = [6, 3, 1, 4, 2, 5]
    L, bs = 6, len(lens)
    mask = [[1 if t < n else 0 for t in range(L)] for n in lens]

    def mat(lo, hi):  # padding positions hold garbage, as in verl's tensors
        return [[rng.uniform(lo, hi) for _ in range(L)] for _ in range(bs)]

    # outcome rewards: the score on each response's last token (verl's reward manager)
    scores = [[0.0] * L for _ in range(bs)]
    for b, n in enumerate(lens):
        scores[b][n - 1] = rng.choice([0.0, 1.0, 0.5, -1.0])
    dense = [[x * k for x, k in zip(row, mr)] for row, mr in zip(mat(-1, 1), mask)]
    values = mat(-1, 1)
    index = [0, 0, 0, 1, 1, 2]  # three groups: 3, 2, 1 responses
    old = mat(-3, -0.1)
    lp = [[old[b][t] + rng.uniform(-0.6, 0.6) for t in range(L)] for b in range(bs)]
    lp[0][1] = old[0][1] + 25  # beyond verl's +-20 clamp
    ref = [[old[b][t] + rng.uniform(-1.5, 1.5) for t in range(L)] for b in range(bs)]
    ref[1][0] = old[1][0] - 30  # k3 clamps
    adv = mat(-2, 2)
    vpreds = [[values[b][t] + rng.uniform(-0.5, 0.5) for t in range(L)] for b in range(bs)]
    returns = mat(-1, 1)

    out = {"source": "verl v0.7.1 core_algos.py / torch_functional.py / ray_trainer.py (algo_ref.py)",
           "lens": lens, "index": index,
           "scores": packed(scores, mask), "dense": packed(dense, mask), "values": packed(values, mask),
           "old": packed(old, mask), "lp": packed(lp, mask), "ref": packed(ref, mask), "adv": packed(adv, mask),
           "vpreds": packed(vpreds, mask), "returns": packed(returns, mask)}
    for name, rew in (("scores", scores), ("dense", dense)):
        for gamma, lam in ((1.0, 1.0), (0.99, 0.95)):
            a, r = gae(rew, values, mask, gamma, lam)
            out[f"gae_{name}_{gamma}_{lam}"] = {"adv": packed(a, mask), "ret": packed(r, mask)}
        a, r = reinforce_pp(rew, mask, 0.99)
        out[f"rpp_{name}"] = {"adv": packed(a, mask), "ret": packed(r, mask)}
    per_resp = lambda m: [m[b][0] for b in range(bs)]  # noqa: E731 (every response has >= 1 token)
    out["grpo_std"] = per_resp(grpo(scores, mask, index, 1e-6, True))
    out["grpo_nostd"] = per_resp(grpo(scores, mask, index, 1e-6, False))
    out["rloo"] = per_resp(rloo(scores, mask, index))
    for kind in ("kl", "abs", "mse", "low_var_kl"):
        out[f"kl_{kind}"] = packed([[kl_forward(lp[b][t], ref[b][t], kind) for t in range(L)] for b in range(bs)],
                                   mask)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        for lo, hi, c in ((0.2, 0.2, 3.0), (0.2, 0.28, 1.5)):
            pg, cf, kl, cl = policy_loss(old, lp, adv, mask, lo, hi, c, mode)
            out[f"pg_{mode}_{lo}_{hi}_{c}"] = {"pg_loss": pg, "pg_clipfrac": cf, "ppo_kl": kl, "pg_clipfrac_lower": cl}
        for cv in (0.5, 0.1):
            vf, vcf = value_loss(vpreds, returns, values, mask, cv, mode)
            out[f"vf_{mode}_{cv}"] = {"vf_loss": vf, "vf_clipfrac": vcf}
        out[f"entropy_{mode}"] = agg_loss(adv, mask, mode)  # agg of any matrix (entropy's path)
    ctl = AdaptiveKLController(0.1, 0.05, 100)
    seq = []
    for kl_now, n in ((0.01, 16), (0.05, 16), (0.2, 32), (0.06, 8), (0.0, 64)):
        ctl.update(kl_now, n)
        seq.append(ctl.value)
    out["adaptive_kl"] = {"init": 0.1, "target": 0.05, "horizon": 100,
                          "updates": [[0.01, 16], [0.05, 16], [0.2, 32], [0.06, 8], [0.0, 64]], "values": seq}
    rew, cur = apply_kl_penalty(scores, old, ref, mask, "low_var_kl", 0.05)
    out["kl_in_reward"] = {"kind": "low_var_kl", "beta": 0.05, "rewards": packed(rew, mask), "current_kl": cur}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
