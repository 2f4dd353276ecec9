#!/usr/bin/env python3
"""attn_bench_torch.py: PyTorch SDPA (cuDNN fused attention and FlashAttention backends) on the
long-sequence attention shapes of cuda_kernel_bench (issue 24), timed the same way (CUDA events,
median of repeats, two warm-up calls) and reported in the same TFLOP/s (4 L^2 D H per sequence,
half of it when causal). Run in the same device call as cuda_kernel_bench so both see the same
GPU state. A benchmark: prints numbers, asserts nothing.

    python3 tests/cuda/attn_bench_torch.py [reps]
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# (sequences, length, heads, kv heads, head_dim, causal): cuda_kernel_bench's 16k shapes
SHAPES = [
    (2, 16384, 32, 8, 128, True),
    (4, 16384, 32, 8, 64, True),
    (1, 16384, 16, 16, 128, False),
    (1, 16384, 32, 32, 64, False),
    (1, 16384, 16, 16, 128, True),
    (1, 16384, 32, 32, 64, True),
]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def time_ms(fn, reps):
    for _ in range(2):
        fn()
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return ms[len(ms) // 2]


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} on {torch.cuda.get_device_name()}")
    g = torch.Generator(device="cuda").manual_seed(1)
    for n, L, H, Hkv, D, causal in SHAPES:
        q = torch.rand((n, H, L, D), device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
        k = torch.rand((n, Hkv, L, D), device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
        v = torch.rand((n, Hkv, L, D), device="cuda", dtype=torch.bfloat16, generator=g) * 2 - 1
        # GQA as expanded K/V (the same FLOPs; not every backend takes enable_gqa)
        ke, ve = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        flops = 4.0 * n * L * L * D * H * (0.5 if causal else 1.0)
        for name, be in BACKENDS:
            try:
                with sdpa_kernel([be]):
                    m = time_ms(lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=causal), reps)
                print(f"sdpa {name:<6} {n:2d} x {L:5d} H{H}/{Hkv} D{D:<3d} {'causal' if causal else 'bidir':<6} "
                      f"{m:8.3f} ms {flops / (m * 1e-3) / 1e12:7.1f} TFLOP/s")
            except RuntimeError as e:  # backend not available for this shape
                print(f"sdpa {name:<6} {n:2d} x {L:5d} H{H}/{Hkv} D{D:<3d} unavailable: {str(e).splitlines()[0][:100]}")
        del q, k, v, ke, ve
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
