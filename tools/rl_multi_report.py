#!/usr/bin/env python3
"""rl_multi_report.py: the tables of tools/rl_h200_x2.sh and rl_h200_x8.sh (issues 25, 26), as
markdown rows ready for docs/benchmarks.md, from what those runs leave under $OUT.

  rl_multi_report.py steps METRICS                       per-step timing_s/* (one row per step)
  rl_multi_report.py phases LABEL=METRICS ...            mean timing_s/* over steps 2.. per run
  rl_multi_report.py weights --metrics M --n-params N [--comm-check M2] [--p2p P2P.json] [--profile SUMMARY]
  rl_multi_report.py dp --dp1 M1 --dp2 M2 [--tol 1e-2]   step-1 gradient norms and update throughput
  rl_multi_report.py bench LABEL=BENCH.json ...          req/s and latency per concurrency
  rl_multi_report.py smi CSV                             per GPU: peak memory, mean / max utilisation
  rl_multi_report.py procmem CSV PID                     one process's device memory over the run
  rl_multi_report.py latency METRICS_TEXT                request-latency p50/p99 from the server's
                                                         Prometheus histogram (shm transport)
  rl_multi_report.py rewardwait METRICS                  timing_s/reward (what the step waited for
                                                         its rewards) p50 / p99 / max over the steps
  rl_multi_report.py dmon LOG                            nvidia-smi dmon: per GPU, the mean of each column
  rl_multi_report.py trace NCCL_TRACE.json               the VERL_COMM_PROFILE trace opened: events per
                                                         rank and per collective, the busiest stream
Only the Python standard library. Missing or empty inputs print a row that says so (the run's
part failed or was skipped) instead of a number; exit 0 unless the arguments are wrong."""
import argparse
import json
import math
import sys


def load_metrics(path):
    """Last record per step (a resumed run appends its steps again)."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    out[r["step"]] = r
    except (OSError, ValueError, KeyError) as e:
        print(f"<!-- {path}: {e} -->")
        return []
    return [out[s] for s in sorted(out)]


def steady(m):
    """Steps after the first (warm-up), or all when there is one."""
    return m[1:] if len(m) > 1 else m


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return str(v)
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def timing_keys(runs):
    keys = sorted({k for m in runs for r in m for k in r if k.startswith("timing_s/") and k != "timing_s/step"})
    return keys + ["timing_s/step"]


def tokens_per_s(r):
    """Tokens of the step (prompts + responses) over the step's time: the whole run's rate."""
    t, n = r.get("timing_s/step"), r.get("perf/total_num_tokens")
    return n / t if t and n is not None else None


def cmd_steps(a):
    m = load_metrics(a.metrics)
    if not m:
        print(f"| (no steps in {a.metrics}) |")
        return
    keys = timing_keys([m])
    print("| step | " + " | ".join(f"`{k[len('timing_s/'):]}`" for k in keys) + " | tokens/s |")
    print("|---" * (len(keys) + 2) + "|")
    for r in m:
        print(f"| {r['step']} | " + " | ".join(fmt(r.get(k)) for k in keys) + f" | {fmt(tokens_per_s(r))} |")


def labelled(items):
    out = []
    for it in items:
        label, _, path = it.partition("=")
        if not path:
            sys.exit(f"rl_multi_report.py: '{it}' is not LABEL=PATH")
        out.append((label, path))
    return out


def cmd_phases(a):
    runs = [(label, load_metrics(p)) for label, p in labelled(a.runs)]
    keys = timing_keys([m for _, m in runs])
    print("| phase (s, mean of steps 2..N) | " + " | ".join(label for label, _ in runs) + " |")
    print("|---" * (len(runs) + 1) + "|")
    for k in keys:
        print(f"| `{k}` | " + " | ".join(fmt(mean([r.get(k) for r in steady(m)])) for _, m in runs) + " |")
    print("| tokens/s (perf/total_num_tokens / timing_s/step) | " +
          " | ".join(fmt(mean([tokens_per_s(r) for r in steady(m)])) for _, m in runs) + " |")
    print("| `perf/throughput` (tokens/s/worker) | " +
          " | ".join(fmt(mean([r.get("perf/throughput") for r in steady(m)])) for _, m in runs) + " |")
    print("| steps | " + " | ".join(str(len(m)) for _, m in runs) + " |")


def profile_rows(path):
    """summary.txt of VERL_COMM_PROFILE: role op comm ranks calls bytes ms algbw busbw."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) == 9 and p[0] != "role":
                    rows.append({"role": p[0], "op": p[1], "comm": p[2], "ranks": int(p[3]), "calls": float(p[4]),
                                 "bytes": int(p[5]), "ms": float(p[6]), "algbw": float(p[7]), "busbw": float(p[8])})
    except (OSError, ValueError) as e:
        print(f"<!-- {path}: {e} -->")
    return rows


def cmd_weights(a):
    m = steady(load_metrics(a.metrics))
    t = mean([r.get("timing_s/update_weights") for r in m])
    fp32 = 4 * a.n_params
    print("| weight sync | value |")
    print("|---|---|")
    print(f"| parameters (fp32 buffer broadcast) | {a.n_params:,} ({fp32 / 1e9:.3f} GB) |")
    print(f"| `timing_s/update_weights` (mean of steps 2..N) | {fmt(t, 4)} s |")
    print(f"| effective rate (fp32 bytes / update_weights, incl. the bf16 conversion) | "
          f"{fmt(fp32 / t / 1e9 if t else None, 1)} GB/s |")
    if a.comm_check:
        cc = load_metrics(a.comm_check)
        print(f"| comm check `comm/weight_sync/busbw_gbps` (mean of steps 2..N, {len(cc)} steps) | "
              f"{fmt(mean([r.get('comm/weight_sync/busbw_gbps') for r in steady(cc)]), 1)} GB/s |")
        ar = [k for r in cc for k in r if k.endswith("/allreduce_busbw_gbps")]
        for k in sorted(set(ar)):
            print(f"| comm check `{k}` | {fmt(mean([r.get(k) for r in steady(cc)]), 1)} GB/s |")
    if a.profile:
        for row in profile_rows(a.profile):
            if row["op"] in ("broadcast", "all_reduce"):
                print(f"| profile {row['role']} {row['op']} ({row['ranks']} ranks, {row['calls']:g} calls/rank, "
                      f"{row['bytes'] / 1e9:.3f} GB/rank) | algbw {row['algbw']:.1f} / busbw {row['busbw']:.1f} GB/s |")
    if a.p2p:
        try:
            with open(a.p2p) as f:
                p = json.load(f)
            for k, v in p.items():
                if k.endswith("_gbps"):
                    print(f"| measured P2P `{k}` ({p.get('method', '?')}) | {v:.1f} GB/s |")
        except (OSError, ValueError) as e:
            print(f"| measured P2P | missing ({e}) |")


def cmd_dp(a):
    m1, m2 = load_metrics(a.dp1), load_metrics(a.dp2)
    if not m1 or not m2:
        print("| DP comparison | a run is missing |")
        return 1
    print("| actor data parallel | DP 1 | DP 2 (ZeRO-1) | relative difference |")
    print("|---|---|---|---|")
    worst = 0.0
    for k in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        x, y = m1[0].get(k), m2[0].get(k)
        rel = abs(x - y) / max(abs(x), 1e-12) if x is not None and y is not None else None
        if k == "actor/grad_norm" and rel is not None:
            worst = rel
        print(f"| step 1 `{k}` | {fmt(x, 6)} | {fmt(y, 6)} | {fmt(rel, 6) if rel is not None else '-'} |")
    for k in ("timing_s/update_actor", "timing_s/old_log_prob", "timing_s/step"):
        print(f"| `{k}` (steps 2..N) | {fmt(mean([r.get(k) for r in steady(m1)]))} | "
              f"{fmt(mean([r.get(k) for r in steady(m2)]))} | |")
    # actor-update throughput: the step's tokens over the update's time
    u1 = mean([r["perf/total_num_tokens"] / r["timing_s/update_actor"] for r in steady(m1)
               if r.get("timing_s/update_actor")])
    u2 = mean([r["perf/total_num_tokens"] / r["timing_s/update_actor"] for r in steady(m2)
               if r.get("timing_s/update_actor")])
    print(f"| update_actor tokens/s | {fmt(u1)} | {fmt(u2)} | scaling {fmt(u2 / u1 if u1 and u2 else None, 2)}x |")
    verdict = "within" if worst <= a.tol else "OUTSIDE"
    print(f"\nstep-1 actor/grad_norm DP 2 vs DP 1: relative difference {worst:.2e}, {verdict} the tolerance {a.tol:g}")
    return 0


def cmd_bench(a):
    print("| server | clients | req/s | seq/s | p50 (ms) | p99 (ms) | max (ms) | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for label, path in labelled(a.runs):
        try:
            with open(path) as f:
                runs = json.load(f)
        except (OSError, ValueError) as e:
            print(f"| {label} | missing ({e}) | | | | | | |")
            continue
        for r in runs if isinstance(runs, list) else [runs]:
            lat = r.get("latency_us", {})
            ms = lambda k: fmt(lat[k] / 1e3, 2) if lat.get(k) is not None else "-"  # noqa: E731
            print(f"| {label} | {r.get('concurrency')} | {fmt(r['throughput']['req_s'], 1)} | "
                  f"{fmt(r['throughput']['seq_s'], 1)} | {ms('p50')} | {ms('p99')} | {ms('max')} | {r.get('errors')} |")


def read_csv(path):
    """nvidia-smi --format=csv,noheader,nounits rows, split and stripped."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                p = [x.strip() for x in line.split(",")]
                if len(p) >= 2 and not p[0].startswith("#"):
                    rows.append(p)
    except OSError as e:
        print(f"<!-- {path}: {e} -->")
    return rows


def num(s):
    try:
        return float(s)
    except ValueError:
        return None


def cmd_smi(a):
    """CSV columns: timestamp, index, memory.used, memory.total, utilization.gpu (nounits)."""
    per = {}
    for p in read_csv(a.csv):
        if len(p) >= 5 and num(p[1]) is not None:
            per.setdefault(int(num(p[1])), []).append((num(p[2]), num(p[4])))
    print("| GPU | samples | peak memory (MiB) | mean utilisation (%) | max utilisation (%) |")
    print("|---|---|---|---|---|")
    for g in sorted(per):
        mem = [m for m, _ in per[g] if m is not None]
        ut = [u for _, u in per[g] if u is not None]
        print(f"| {g} | {len(per[g])} | {fmt(max(mem) if mem else None, 0)} | {fmt(mean(ut), 1)} | "
              f"{fmt(max(ut) if ut else None, 0)} |")


def cmd_procmem(a):
    """CSV columns: timestamp, pid, used_memory (MiB) (nvidia-smi --query-compute-apps)."""
    mem = [num(p[2]) for p in read_csv(a.csv) if len(p) >= 3 and p[1] == str(a.pid) and num(p[2]) is not None]
    if not mem:
        print(f"| reward server (pid {a.pid}) device memory | no samples |")
        return
    print(f"| reward server device memory over the run ({len(mem)} samples) | min {min(mem):.0f}"
          f" / max {max(mem):.0f} MiB, first {mem[0]:.0f}, last {mem[-1]:.0f} |")


def histogram(path, family, label):
    """Cumulative buckets [(le, count)] of family{label...} in a Prometheus text file."""
    b = []
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(family + "_bucket{") and label in line:
                    le = line.split('le="', 1)[1].split('"', 1)[0]
                    b.append((math.inf if le == "+Inf" else float(le), float(line.rsplit(None, 1)[1])))
    except (OSError, IndexError, ValueError) as e:
        print(f"<!-- {path}: {e} -->")
    return sorted(b)


def quantile(b, q):
    """Upper bound of the bucket holding the q-quantile (the histogram's resolution)."""
    if not b or b[-1][1] == 0:
        return None
    want = q * b[-1][1]
    for le, c in b:
        if c >= want:
            return le
    return math.inf


def cmd_latency(a):
    b = histogram(a.metrics_text, "verl_reward_request_latency_seconds", 'transport="shm"')
    n = int(b[-1][1]) if b else 0
    p50, p99 = quantile(b, 0.5), quantile(b, 0.99)
    ms = lambda v: "-" if v is None else ("> last bucket" if math.isinf(v) else f"<= {v * 1e3:g}")  # noqa: E731
    print(f"| reward requests over shm, server side intake to answer ({n} requests) | p50 {ms(p50)} ms, "
          f"p99 {ms(p99)} ms (bucket bounds) |")


def pct(xs, q):
    """Nearest-rank percentile (the sample at rank ceil(q n))."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else None


def cmd_rewardwait(a):
    m = load_metrics(a.metrics)
    w = [r["timing_s/reward"] * 1e3 for r in m if "timing_s/reward" in r]
    print(f"| `timing_s/reward` as the trainer waited ({len(w)} steps, one request batch each) | p50 "
          f"{fmt(pct(w, 0.5), 2)} / p99 {fmt(pct(w, 0.99), 2)} / max {fmt(max(w) if w else None, 2)} ms |")
    srv = [r["reward/server_ms/max"] for r in m if "reward/server_ms/max" in r]
    n = sum(r.get("reward/requests", 0) for r in m)
    print(f"| `reward/server_ms/max` (queue + compute the server reported, the step's slowest of "
          f"{n:g} requests in all) over the steps | p50 {fmt(pct(srv, 0.5), 2)} / p99 {fmt(pct(srv, 0.99), 2)} / "
          f"max {fmt(max(srv) if srv else None, 2)} ms |")


def cmd_dmon(a):
    """nvidia-smi dmon -o T: '# Time gpu sm mem ...' header, then rows; '-' is not a number."""
    cols, per = None, {}
    try:
        with open(a.log) as f:
            for line in f:
                p = line.split()
                if line.startswith("#") and cols is None and "gpu" in p:
                    cols = p[1:] if p[0] == "#" else [p[0][1:]] + p[1:]
                elif not line.startswith("#") and cols and len(p) == len(cols):
                    per.setdefault(p[cols.index("gpu")], []).append(p)
    except OSError as e:
        print(f"<!-- {a.log}: {e} -->")
    if not cols:
        print(f"| nvidia-smi dmon | no samples in {a.log} |")
        return
    shown = [c for c in cols if c not in ("Time", "gpu", "Date")]
    print("| GPU | samples | " + " | ".join(f"{c} (mean)" for c in shown) + " |")
    print("|---" * (len(shown) + 2) + "|")
    for g in sorted(per, key=lambda x: int(x) if x.isdigit() else 0):
        vals = [mean([num(r[cols.index(c)]) for r in per[g]]) for c in shown]
        print(f"| {g} | {len(per[g])} | " + " | ".join(fmt(v, 1) for v in vals) + " |")


def cmd_trace(a):
    """Chrome trace of vr_commprof: "X" events (name "<role> <op>", pid rank, tid stream, dur us,
    args.bytes) and "M" process_name records."""
    try:
        with open(a.trace) as f:
            t = json.load(f)
    except (OSError, ValueError) as e:
        print(f"| communication trace | does not open: {e} |")
        return 1
    ev = t.get("traceEvents", []) if isinstance(t, dict) else t
    names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    xs = [e for e in ev if e.get("ph") == "X"]
    if not xs:
        print(f"| communication trace | {len(ev)} records, no collectives |")
        return 1
    span = (max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs)) / 1e6
    print(f"| communication trace: {len(xs)} events on {len(names)} ranks over {span:.2f} s | calls | GB | busy s |")
    print("|---|---|---|---|")
    per = {}
    for e in xs:
        k = (e["name"], e["pid"])
        c = per.setdefault(k, [0, 0, 0.0])
        c[0] += 1
        c[1] += e.get("args", {}).get("bytes", 0)
        c[2] += e["dur"] / 1e6
    for (name, pid), (n, b, d) in sorted(per.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        print(f"| {name} on {names.get(pid, 'rank %d' % pid)} | {n} | {b / 1e9:.3f} | {d:.3f} |")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("steps")
    p.add_argument("metrics")
    p = sub.add_parser("phases")
    p.add_argument("runs", nargs="+")
    p = sub.add_parser("weights")
    p.add_argument("--metrics", required=True)
    p.add_argument("--n-params", type=int, required=True)
    p.add_argument("--comm-check")
    p.add_argument("--p2p")
    p.add_argument("--profile")
    p = sub.add_parser("dp")
    p.add_argument("--dp1", required=True)
    p.add_argument("--dp2", required=True)
    p.add_argument("--tol", type=float, default=1e-2)
    p = sub.add_parser("bench")
    p.add_argument("runs", nargs="+")
    p = sub.add_parser("smi")
    p.add_argument("csv")
    p = sub.add_parser("procmem")
    p.add_argument("csv")
    p.add_argument("pid", type=int)
    p = sub.add_parser("latency")
    p.add_argument("metrics_text")
    p = sub.add_parser("rewardwait")
    p.add_argument("metrics")
    p = sub.add_parser("dmon")
    p.add_argument("log")
    p = sub.add_parser("trace")
    p.add_argument("trace")
    a = ap.parse_args()
    rc = {"steps": cmd_steps, "phases": cmd_phases, "weights": cmd_weights, "dp": cmd_dp, "bench": cmd_bench,
          "smi": cmd_smi, "procmem": cmd_procmem, "latency": cmd_latency, "rewardwait": cmd_rewardwait,
          "dmon": cmd_dmon, "trace": cmd_trace}[a.cmd](a)
    sys.stdout.flush()
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
