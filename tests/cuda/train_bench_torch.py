#!/usr/bin/env python3
"""train_bench_torch.py: the PyTorch side of cuda_train_bench (a benchmark, not a test).

transformers' Qwen2 / Llama causal LMs on the same shapes with random weights: fp32 master
weights, bf16 autocast, SDPA attention, fused AdamW (clip 1.0), the token-mean NLL of
n_seqs x seq_len tokens (no padding); eager and under torch.compile, in the same process.
Also a log-prob-only forward (no grad: logits -> log_softmax -> gather), eager and compiled.
Prints tokens/s and MFU with the same flop count as cuda_train_bench (6N + 6 L (H D) S per
trained token, 2N + 2 L (H D) S per forward token), a "clocks" line (with --clocks 1: the SM clock
and power sampled over the timed loops, as cuda_train_bench's) and one JSON line per run ("json ...").

--sdpa: the SDPA backends to run each mode with (torch.nn.attention.sdpa_kernel around the whole
run, so torch.compile traces with it): "default" leaves PyTorch's choice, which under
torch.compile on the H200 (torch 2.11, transformers 5.17) took the memory-efficient CUTLASS
kernels (sm80) for these shapes: 56 of the compiled Qwen2-0.5B step's 159 ms of kernel time
(docs/benchmarks.md). "flash", "cudnn", "efficient" force one; a backend that cannot run the
model is reported ("not available") and skipped.

  python3 train_bench_torch.py [--model qwen2-0.5b|llama-3.2-1b|all] [--seqs 16] [--len 1024]
                               [--iters 5] [--modes eager,compile] [--gemm-tflops 781]
                               [--sdpa default,flash,cudnn,efficient] [--clocks 0|1]
"""
import contextlib
import ctypes
import gc
import argparse
import json
import math
import threading
import time

import torch
import transformers

SHAPES = {
    "qwen2-0.5b": dict(cls="Qwen2", vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                       num_key_value_heads=2, intermediate_size=4864, rope_theta=1000000.0),
    "llama-3.2-1b": dict(cls="Llama", vocab_size=128256, hidden_size=2048, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, intermediate_size=8192, rope_theta=500000.0),
}


def build(name):
    s = dict(SHAPES[name])
    cls = s.pop("cls")
    cfg_cls = getattr(transformers, cls + "Config")
    model_cls = getattr(transformers, cls + "ForCausalLM")
    cfg = cfg_cls(tie_word_embeddings=True, max_position_embeddings=4096, rms_norm_eps=1e-6, **s)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = model_cls(cfg).float()
    return model, cfg


class Clocks:
    """The SM clock and board power sampled every 20 ms while timed loops run (NVML through ctypes,
    as cuda_train_bench's gpu_sampler.h; "not sampled" without the driver library): at the card's
    power cap the clock falls well below its maximum."""

    def __init__(self, on=True):
        self.nvml, self.dev, self.on = None, None, on
        self.samples = []
        if not on:
            return
        try:
            nvml = ctypes.CDLL("libnvidia-ml.so.1")
            p = torch.cuda.get_device_properties(torch.cuda.current_device())
            bus = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0".encode()
            dev = ctypes.c_void_p()
            if nvml.nvmlInit_v2() == 0 and nvml.nvmlDeviceGetHandleByPciBusId_v2(bus, ctypes.byref(dev)) == 0:
                self.nvml, self.dev = nvml, dev
                self.reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                    getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        except (OSError, AttributeError):
            pass

    def _loop(self, stop):
        mhz, mw, r = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        while not stop.is_set():
            if self.nvml.nvmlDeviceGetClockInfo(self.dev, 1, ctypes.byref(mhz)) == 0 and \
                    self.nvml.nvmlDeviceGetPowerUsage(self.dev, ctypes.byref(mw)) == 0:
                if not self.reasons or self.reasons(self.dev, ctypes.byref(r)) != 0:
                    r.value = 0
                self.samples.append((mhz.value, mw.value / 1000.0, (r.value & 0x84) != 0))
            stop.wait(0.02)

    @contextlib.contextmanager
    def window(self):
        if not self.nvml:
            yield
            return
        stop = threading.Event()
        th = threading.Thread(target=self._loop, args=(stop,), daemon=True)
        th.start()
        try:
            yield
        finally:
            stop.set()
            th.join()

    def take(self):
        s, self.samples = self.samples, []
        if not s:
            return "no samples" if self.nvml else "not sampled (no NVML)" if self.on else "not sampled (--clocks 0)"
        m = [x[0] for x in s]
        return (f"SM {sum(m) / len(m):.0f} MHz mean ({min(m)}-{max(m)}), {sum(x[1] for x in s) / len(s):.0f} W, "
                f"power-capped {100.0 * sum(x[2] for x in s) / len(s):.0f}% of {len(s)} samples")


CLOCKS = None


def timed(fn, iters, warm):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    with CLOCKS.window():
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
    return t / iters


def sdpa_context(backend):
    if backend == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                        "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend])


def run(name, mode, args, backend="default"):
    model, cfg = build(name)
    n_params = sum(p.numel() for p in model.parameters())
    L, H, C = cfg.num_hidden_layers, cfg.num_attention_heads, cfg.hidden_size
    D = C // H
    T = args.seqs * args.len
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (args.seqs, args.len), device="cuda", generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    if mode != "eager":
        torch._dynamo.reset()  # traced afresh under this run's SDPA backend
    fwd = model if mode == "eager" else torch.compile(model)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    def logprobs():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            logits = fwd(input_ids=ids).logits[:, :-1].float()
            return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])

    torch.cuda.reset_peak_memory_stats()
    t_step = timed(step, args.iters, 3)
    clk_step = CLOCKS.take()
    peak = torch.cuda.max_memory_allocated() / 2**30
    loss = float(step())
    t_fwd = timed(logprobs, args.iters, 2)
    clk_fwd = CLOCKS.take()
    attn = 6.0 * L * H * D * args.len
    tps, tpf = T / t_step, T / t_fwd
    mfu = tps * (6.0 * n_params + attn) / (args.gemm_tflops * 1e12)
    mfu_f = tpf * (2.0 * n_params + attn / 3) / (args.gemm_tflops * 1e12)
    tag = mode if backend == "default" else f"{mode}/{backend}"
    print(f"torch {tag:7s} {name:14s} N={n_params / 1e9:.3f}B  step {t_step * 1e3:.1f} ms  {tps / 1e3:.1f}k tokens/s  "
          f"MFU {100 * mfu:.1f}%  |  log-prob forward {t_fwd * 1e3:.1f} ms  {tpf / 1e3:.1f}k tokens/s  "
          f"MFU {100 * mfu_f:.1f}%  |  peak memory {peak:.1f} GiB  loss {loss:.4f} (ln V = {math.log(cfg.vocab_size):.4f})",
          flush=True)
    print(f"clocks torch {tag:7s} {name:14s} timed steps: {clk_step}  |  timed log-prob forwards: {clk_fwd}", flush=True)
    print("json " + json.dumps(dict(model=name, mode=mode, sdpa=backend, params=n_params, tokens=T, step_ms=t_step * 1e3,
                                    tokens_per_s=tps, mfu=mfu, fwd_ms=t_fwd * 1e3, fwd_tokens_per_s=tpf, fwd_mfu=mfu_f,
                                    peak_gib=peak, torch=torch.__version__,
                                    transformers=transformers.__version__)), flush=True)
    del model, opt, fwd
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="all")
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--len", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--gemm-tflops", type=float, default=781.0)
    ap.add_argument("--sdpa", default="default")
    ap.add_argument("--clocks", type=int, default=0,
                    help="1: sample the SM clock and power over the timed loops (a Python thread, every 20 ms)")
    args = ap.parse_args()
    global CLOCKS
    CLOCKS = Clocks(args.clocks != 0)
    names = list(SHAPES) if args.model == "all" else [args.model]
    for mode in args.modes.split(","):
        for backend in args.sdpa.split(","):
            if backend not in ("default", "flash", "cudnn", "efficient"):
                raise SystemExit(f"--sdpa {backend}: not default|flash|cudnn|efficient")
            for name in names:
                failed = None
                try:
                    with sdpa_context(backend):
                        run(name, mode, args, backend)
                except torch.OutOfMemoryError:
                    raise
                except RuntimeError as e:  # no kernel of that backend for this model
                    lines = str(e).splitlines()
                    failed = f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]
                if failed:  # outside the handler: the failed run's frame (model, activations) is released
                    print(f"torch {mode}/{backend} {name}: not available: {failed}", flush=True)
                    gc.collect()
                    torch._dynamo.reset()
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
