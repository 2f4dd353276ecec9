#!/usr/bin/env python3
"""plot_metrics.py: curves of a verl-trainer run's metrics file (trainer.metrics_file, JSON lines,
one record per step; a resumed run appends its steps again: the last record of a step wins).

  tools/plot_metrics.py metrics.jsonl [-o metrics.png] [--keys K1,K2,...]

Default panels: reward (critic/score/mean, critic/rewards/mean), KL (actor/ppo_kl,
actor/kl_loss, actor/reward_kl_penalty), losses (actor/pg_loss, critic/vf_loss), entropy and
response length, and the timing breakdown (timing_s/*). Panels whose metrics the run did not
log are left out. Needs matplotlib (Debian: apt-get install python3-matplotlib); without it the
script says so and exits 3. --summary prints the first/last value of every key instead (no
matplotlib needed)."""
import argparse
import json
import sys

PANELS = [
    ("reward", ["critic/score/mean", "critic/rewards/mean"]),
    ("KL", ["actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty"]),
    ("loss", ["actor/pg_loss", "critic/vf_loss"]),
    ("entropy / length", ["actor/entropy", "response_length/mean"]),
    ("timing_s", None),  # every timing_s/* key
]


def load(path):
    steps = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            if not isinstance(r, dict) or not isinstance(r.get("step"), int):
                sys.exit(f"{path}:{n}: a record needs an integer \"step\"")
            steps[r["step"]] = r
    if not steps:
        sys.exit(f"{path}: no records")
    return [steps[s] for s in sorted(steps)]


def series(recs, key):
    xs = [r["step"] for r in recs if isinstance(r.get(key), (int, float))]
    ys = [r[key] for r in recs if isinstance(r.get(key), (int, float))]
    return xs, ys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("metrics")
    ap.add_argument("-o", "--out", default="metrics.png")
    ap.add_argument("--keys", help="comma-separated keys: one panel each, instead of the defaults")
    ap.add_argument("--summary", action="store_true", help="print first/last values, no plot")
    a = ap.parse_args()
    recs = load(a.metrics)
    keys = sorted({k for r in recs for k in r if k != "step"})
    if a.summary:
        for k in keys:
            xs, ys = series(recs, k)
            if ys:
                print(f"{k:40s} step {xs[0]:>6}: {ys[0]:<12.6g} step {xs[-1]:>6}: {ys[-1]:.6g}")
        return 0
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_metrics.py: matplotlib is not installed, so no PNG. HINT: apt-get install python3-matplotlib "
              "(Debian), or --summary for a text table", file=sys.stderr)
        return 3
    panels = [(k, [k]) for k in a.keys.split(",")] if a.keys else PANELS
    chosen = []
    for title, ks in panels:
        ks = [k for k in keys if k.startswith("timing_s/")] if ks is None else [k for k in ks if k in keys]
        if ks:
            chosen.append((title, ks))
    if not chosen:
        sys.exit(f"{a.metrics}: none of the keys to plot are in the file (keys: {', '.join(keys[:20])} ...)")
    fig, axes = plt.subplots(len(chosen), 1, figsize=(9, 2.6 * len(chosen)), sharex=True, squeeze=False)
    for ax, (title, ks) in zip(axes[:, 0], chosen):
        for k in ks:
            ax.plot(*series(recs, k), label=k, linewidth=1.2)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"wrote {a.out} ({len(recs)} steps, {sum(len(k) for _, k in chosen)} curves)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
