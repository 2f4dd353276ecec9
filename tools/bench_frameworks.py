#!/usr/bin/env python3
"""Per-sample framework calls against the batch path (issue 17's benchmark).

    PYTHONPATH=build/python python3 tools/bench_frameworks.py --shm-name verl_reward_shm \
        --url http://127.0.0.1:8080 --n 1024 --seq-len 256 --reps 5

Against a running verl-reward-server, three ways to score the same N random sequences:
  batch      one RewardClient.score_with_info per max_batch sequences, sequentially
             (what a batch reward manager does);
  per_sample N concurrent coroutines, each awaiting one sequence through RewardService
             (the call VerlRewardLoopManager.run_single makes for verl's reward loop;
             micro-batched: max_batch, linger_ms);
  classify   N per-sample POST /classify {"input": [ids]} to the bridge
             (verl_reward.openrlhf_bridge, started here on the same service) from
             --http-threads threads, as verl posts to a vLLM reward server per sample.
Prints one JSON line per way: sequences/s (median over reps) and, for the per-sample
ways, p50 / p99 latency of one call in ms. No verl needed.
"""

import argparse
import asyncio
import concurrent.futures
import json
import random
import statistics
import time
import urllib.request

from verl_reward import RewardClient
from verl_reward.openrlhf_bridge import Bridge
from verl_reward.service import RewardService


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_batch(rc, seqs, max_batch):
    t = time.perf_counter()
    for i in range(0, len(seqs), max_batch):
        rc.score_with_info(seqs[i:i + max_batch])
    return time.perf_counter() - t, None


def run_per_sample(svc, seqs):
    async def one(s):
        t = time.perf_counter()
        await svc.score_async("ids", s)
        return time.perf_counter() - t

    async def main():
        t = time.perf_counter()
        lat = await asyncio.gather(*[one(s) for s in seqs])
        return time.perf_counter() - t, lat

    return asyncio.run(main())


def run_classify(url, seqs, threads):
    def one(s):
        t = time.perf_counter()
        req = urllib.request.Request(url + "/classify", data=json.dumps({"input": s}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            json.loads(r.read())
        return time.perf_counter() - t

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        lat = list(ex.map(one, seqs))
    return time.perf_counter() - t, lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shm-name", default="verl_reward_shm")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=32000, help="token ids drawn below this")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--linger-ms", type=float, default=2.0)
    ap.add_argument("--max-inflight", type=int, default=4)
    ap.add_argument("--http-threads", type=int, default=64)
    ap.add_argument("--skip-classify", action="store_true")
    a = ap.parse_args()
    rng = random.Random(1)
    seqs = [[rng.randrange(a.vocab) for _ in range(a.seq_len)] for _ in range(a.n)]
    svc = RewardService(shm_name=a.shm_name, max_batch=a.max_batch, linger_ms=a.linger_ms,
                        max_inflight=a.max_inflight)
    with RewardClient(a.shm_name, timeout_s=120) as rc:
        ways = [("batch", lambda: run_batch(rc, seqs, a.max_batch)), ("per_sample", lambda: run_per_sample(svc, seqs))]
        bridge = None
        if not a.skip_classify:
            bridge = Bridge(RewardService(shm_name=a.shm_name, max_batch=a.max_batch, linger_ms=a.linger_ms,
                                          max_inflight=a.max_inflight), port=0)
            ways.append(("classify", lambda: run_classify(bridge.url, seqs, a.http_threads)))
        for f in [w[1] for w in ways]:
            f()                                   # warm-up (connections, CUDA graphs)
        for name, f in ways:
            walls, lats = [], []
            before = svc.stats().get("ids", (0, 0))
            for _ in range(a.reps):
                wall, lat = f()
                walls.append(wall)
                lats.extend(lat or [])
            out = {"way": name, "n": a.n, "seq_len": a.seq_len, "reps": a.reps,
                   "seqs_per_s": round(a.n / statistics.median(walls), 1)}
            if lats:
                out.update(p50_ms=round(1e3 * pct(lats, 0.5), 3), p99_ms=round(1e3 * pct(lats, 0.99), 3))
            if name == "per_sample":
                after = svc.stats()["ids"]
                out["requests_per_rep"] = (after[0] - before[0]) / a.reps
            print(json.dumps(out), flush=True)
        if bridge is not None:
            bridge.close()


if __name__ == "__main__":
    main()
