#!/usr/bin/env python3
"""rollout_bench_hf.py: the peer side of the rollout benchmark (tests/cuda/cuda_rollout_bench.c).

transformers `generate` on the same shapes and workload: P prompts of L random tokens, N new
tokens each (min_new_tokens = N, so no response stops early), greedy, bf16 weights (random, as
ours), SDPA attention, with the default (dynamic) cache and with cache_implementation="static"
(which transformers compiles). Each configuration runs once untimed (the static cache at full
length: compilation; the dynamic one 8 tokens: allocator warm-up) and then once timed; tokens/s = P * N / the timed call's wall time. Prints one line per
run and writes a JSON list (--json).

--sdpa: the SDPA backends to run each cache with (torch.nn.attention.sdpa_kernel around the run, so
the static cache's compilation traces with it; the compiled training peer had taken the
memory-efficient kernels by default: docs/benchmarks.md, thirteenth session). "default" leaves
PyTorch's choice; a backend that cannot run is reported ("not available") and skipped.

Usage (on the GPU machine): python3 tools/rollout_bench_hf.py [--shapes llama-1b,qwen2-0.5b]
       [--caches dynamic,static] [--prompts 64] [--prompt-len 128] [--new 256] [--json out.json]
       [--sdpa default,cudnn,flash,efficient]
"""
import argparse
import contextlib
import gc
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

SHAPES = {
    # name: (config class, vocab, hidden, layers, heads, kv heads, intermediate)
    "llama-1b": (LlamaConfig, 128256, 2048, 16, 32, 8, 8192),
    "qwen2-0.5b": (Qwen2Config, 151936, 896, 24, 14, 2, 4864),
}


def build(name, max_len):
    cls, V, C, L, H, KV, F = SHAPES[name]
    cfg = cls(vocab_size=V, hidden_size=C, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
              intermediate_size=F, tie_word_embeddings=True, max_position_embeddings=max(4096, max_len))
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:  # transformers 4: torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    return model.eval()


def run(model, ids, new, cache):
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    mask = torch.ones_like(ids)
    # warm-up: the static cache compiles for its exact cache length, so it warms up at full length;
    # the dynamic cache needs only a short run
    warm = dict(kw) if cache == "static" else dict(kw, max_new_tokens=8, min_new_tokens=8)
    with torch.inference_mode():
        model.generate(ids, attention_mask=mask, **warm)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, attention_mask=mask, **kw)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    gen = (out.shape[1] - ids.shape[1]) * ids.shape[0]
    return gen, dt


def sdpa_context(backend):
    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="llama-1b,qwen2-0.5b")
    ap.add_argument("--caches", default="dynamic,static")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--json")
    ap.add_argument("--sdpa", default="default")
    a = ap.parse_args()
    backends = a.sdpa.split(",")
    for b in backends:
        if b not in ("default", "flash", "cudnn", "efficient"):
            raise SystemExit(f"--sdpa {b}: not default|flash|cudnn|efficient")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}",
          flush=True)
    results = []
    for name in a.shapes.split(","):
        torch.manual_seed(0)
        model = build(name, a.prompt_len + a.new)
        V = SHAPES[name][1]
        ids = torch.randint(0, V, (a.prompts, a.prompt_len), device="cuda")
        for cache in a.caches.split(","):
            for backend in backends:
                torch._dynamo.reset()  # the static cache compiles afresh under this backend
                t0 = time.perf_counter()
                failed = None
                try:
                    with sdpa_context(backend):
                        gen, dt = run(model, ids, a.new, cache)
                except torch.OutOfMemoryError:
                    raise
                except RuntimeError as e:  # no kernel of that backend for this call
                    lines = str(e).splitlines()
                    failed = f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]
                if failed:
                    print(json.dumps({"shape": name, "cache": cache, "sdpa": backend, "not_available": failed}),
                          flush=True)
                    gc.collect()
                    torch.cuda.empty_cache()
                    continue
                r = {"shape": name, "cache": cache, "sdpa": backend, "prompts": a.prompts, "prompt_len": a.prompt_len,
                     "new_tokens": a.new, "tokens": gen, "wall_s": round(dt, 4), "tokens_per_s": round(gen / dt, 1),
                     "with_warmup_s": round(time.perf_counter() - t0, 1)}
                results.append(r)
                print(json.dumps(r), flush=True)
                if a.json:
                    with open(a.json, "w") as f:
                        json.dump(results, f, indent=1)
        del model
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
