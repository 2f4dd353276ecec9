#!/usr/bin/env python3
"""Per-sample framework calls against the batch path (issue 17's benchmark).

    PYTHONPATH=build/python python3 tools/bench_frameworks.py --shm-name verl_reward_shm \
        --url http://127.0.0.1:8080 --n 1024 --seq-len 256 --reps 5 [--json-out FILE]

Against a running verl-reward-server (shared memory --shm-name, HTTP --url), four ways to
score the same N sequences of --seq-len tokens (prompt half, response half):
  batch       one RewardClient.score_with_info per --max-batch sequences, one after the other
              (what a batch reward manager does);
  run_single  N concurrent VerlRewardLoopManager.run_single coroutines, one sample each, as
              verl's RewardLoopWorker.compute_score_batch runs them (one task per sample,
              gathered), inside the verl 0.9.0 stand-in of tests/python/verl_loop_standin.py
              (verl itself is not needed); the manager micro-batches them (--max-batch,
              --linger-ms, --max-inflight) into few shared-memory requests;
  service     the same N coroutines one level down: RewardService.score_async, the call
              run_single makes (no DataProto handling);
  classify    N concurrent coroutines posting verl's vLLM payload {"model", "input": [ids],
              "use_activation": false} to the server's own POST /classify, one sequence each,
              each on a fresh connection (verl opens an aiohttp session per request), at most
              --http-concurrency at once; no tokenizer involved (token ids).
Prints one JSON line per way: sequences/s (median over reps) and, for the per-sample ways,
p50 / p99 latency of one call in ms (over all reps), requests per rep where counted; then
{"ratio": ...}: batch sequences/s over run_single's (the issue's target: at most 1.5). The
DataProto tensors are torch tensors when torch is importable (as in verl), else numpy arrays.
"""

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time

from verl_reward import RewardClient
from verl_reward.service import RewardService

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))     # the verl stand-ins


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def make_tensor():
    try:
        import torch
        return lambda rows: torch.tensor(rows, dtype=torch.int64), "torch"
    except ImportError:
        pass
    try:
        import numpy
        return lambda rows: numpy.asarray(rows, dtype=numpy.int64), "numpy"
    except ImportError:
        from verl_standin import ListTensor
        return ListTensor, "lists"


class PolicyTok:
    """The policy tokenizer run_single decodes responses with (for solution_str)."""
    eos_token = "</s>"

    def decode(self, ids, skip_special_tokens=True):
        return "#### %d" % (int(list(ids)[-1]) % 10)


def run_batch(rc, seqs, max_batch):
    t = time.perf_counter()
    for i in range(0, len(seqs), max_batch):
        rc.score_with_info(seqs[i:i + max_batch])
    return time.perf_counter() - t, None


def run_service(svc, seqs):
    async def one(s):
        t = time.perf_counter()
        await svc.score_async("ids", s)
        return time.perf_counter() - t

    async def main():
        t = time.perf_counter()
        lat = await asyncio.gather(*[one(s) for s in seqs])
        return time.perf_counter() - t, lat

    return asyncio.run(main())


def run_run_single(mgr, items):
    """items: data[i:i + 1] per sample, sliced beforehand (verl slices while creating the tasks;
    the slicing is verl's cost, not the reward path's)."""
    async def one(item):
        t = time.perf_counter()
        await mgr.run_single(item)
        return time.perf_counter() - t

    async def main():
        t = time.perf_counter()
        lat = await asyncio.gather(*[asyncio.create_task(one(it)) for it in items])
        return time.perf_counter() - t, lat

    return asyncio.run(main())


async def _post_classify(host, port, body):
    r, w = await asyncio.open_connection(host, port)
    try:
        w.write(b"POST /classify HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (host.encode(), len(body)) + body)
        await w.drain()
        raw = await r.read()
    finally:
        w.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if status != 200:
        raise RuntimeError("POST /classify answered %d: %s" % (status, payload[:200]))
    return json.loads(payload)["data"][-1]["probs"][-1]


def run_classify(url, seqs, concurrency):
    hostport = url.split("://", 1)[-1].rstrip("/")
    host, port = hostport.rsplit(":", 1)
    bodies = [json.dumps({"model": "rm", "input": s, "use_activation": False}).encode() for s in seqs]

    async def main():
        sem = asyncio.Semaphore(concurrency)

        async def one(b):
            async with sem:
                t = time.perf_counter()
                await _post_classify(host, int(port), b)
                return time.perf_counter() - t

        t = time.perf_counter()
        lat = await asyncio.gather(*[one(b) for b in bodies])
        return time.perf_counter() - t, lat

    return asyncio.run(main())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shm-name", default="verl_reward_shm")
    ap.add_argument("--url", default=None, help="the server's HTTP address for the classify way")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=32000, help="token ids drawn from [3, vocab)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--linger-ms", type=float, default=2.0)
    ap.add_argument("--max-inflight", type=int, default=4)
    ap.add_argument("--http-concurrency", type=int, default=1024)
    ap.add_argument("--ways", default="batch,run_single,service,classify")
    ap.add_argument("--json-out", default=None, help="also write the JSON lines to this file")
    a = ap.parse_args()
    ways = a.ways.split(",")
    if "classify" in ways and not a.url:
        ways.remove("classify")
        print("classify skipped: no --url", file=sys.stderr)
    rng = random.Random(1)
    p_len = a.seq_len // 2
    prompts = [[rng.randrange(3, a.vocab) for _ in range(p_len)] for _ in range(a.n)]
    responses = [[rng.randrange(3, a.vocab) for _ in range(a.seq_len - p_len)] for _ in range(a.n)]
    seqs = [p + r for p, r in zip(prompts, responses)]
    settings = dict(shm_name=a.shm_name, max_batch=a.max_batch, linger_ms=a.linger_ms, max_inflight=a.max_inflight)
    svc = RewardService(**settings)

    import verl_loop_standin as standin
    from verl_standin import make_batch
    tensor, tensor_kind = make_tensor()
    verl = standin.VerlStandIn("0.9.0").install()
    config = standin.Config.of({"reward": {
        "reward_manager": {"source": "importlib", "name": "VerlRewardLoopManager",
                           "module": {"path": "pkg://verl_reward.verl_reward_loop", "name": "custom_reward_manager"}},
        "reward_kwargs": dict(settings), "custom_reward_function": {"path": None, "name": "compute_score"}}})
    mgr = verl.make_manager(config, PolicyTok())
    ntb = {"data_source": ["openai/gsm8k"] * a.n, "reward_model": [{"ground_truth": str(i % 10)} for i in range(a.n)],
           "extra_info": [{"index": i} for i in range(a.n)]}
    data = standin.loop_data(make_batch(prompts, responses, p_len, a.seq_len - p_len, tensor=tensor,
                                        non_tensor_batch=ntb))
    items = [data[i:i + 1] for i in range(a.n)]

    lines = []
    with RewardClient(a.shm_name, timeout_s=120) as rc:
        run = {"batch": lambda: run_batch(rc, seqs, a.max_batch), "service": lambda: run_service(svc, seqs),
               "run_single": lambda: run_run_single(mgr, items),
               "classify": lambda: run_classify(a.url, seqs, a.http_concurrency)}
        for w in ways:
            run[w]()                              # warm-up (connections, CUDA graphs, the loop's batcher)
        for name in ways:
            walls, lats = [], []
            stats_of = mgr.service if name == "run_single" else svc
            before = stats_of.stats().get("ids", (0, 0))
            for _ in range(a.reps):
                wall, lat = run[name]()
                walls.append(wall)
                lats.extend(lat or [])
            out = {"way": name, "n": a.n, "seq_len": a.seq_len, "reps": a.reps,
                   "seqs_per_s": round(a.n / statistics.median(walls), 1)}
            if lats:
                out.update(p50_ms=round(1e3 * pct(lats, 0.5), 3), p99_ms=round(1e3 * pct(lats, 0.99), 3))
            if name in ("service", "run_single"):
                after = stats_of.stats().get("ids", (0, 0))
                out["requests_per_rep"] = (after[0] - before[0]) / a.reps
            if name == "run_single":
                out["tensors"] = tensor_kind
            lines.append(out)
            print(json.dumps(out), flush=True)
    verl.uninstall()
    by = {o["way"]: o["seqs_per_s"] for o in lines}
    if "batch" in by and "run_single" in by:
        r = {"ratio": "batch / run_single sequences/s", "value": round(by["batch"] / by["run_single"], 3),
             "target_max": 1.5}
        lines.append(r)
        print(json.dumps(r), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            for o in lines:
                f.write(json.dumps(o) + "\n")


if __name__ == "__main__":
    main()
