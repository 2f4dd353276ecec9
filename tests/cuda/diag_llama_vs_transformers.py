#!/usr/bin/env python3
"""diag_llama_vs_transformers.py: where do our llama scores part from transformers?

A diagnostic (GPU machine, torch + transformers), not a test. For a few
random-weight Llama shapes with FEW layers (so that a small per-layer
difference is not amplified by depth), scores sequences of growing length with
  ref   transformers fp32 (bf16-rounded weights upcast, TF32 off)
  tf16  transformers bf16 (SDPA)
  cuda  our runtime, --device cuda:0
  cpu   our runtime, --device cpu (fp32 reference backend)
and prints one row per sequence. Usage:
  diag_llama_vs_transformers.py --runner PATH/cuda_bench_runner --dir /tmp/diag [--layers 2] [--rope-bf16]

Finding (docs/benchmarks.md, "Run 2-3 score mismatch and its cause"): with
model.to(torch.bfloat16) transformers' rotary inv_freq buffers are rounded to bf16
too (and stay rounded after .float()), so its scores drift from ours - cuda and cpu
backends alike - as sequences grow. --rope-bf16 reproduces that; the default keeps
inv_freq fp32.
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess

LLAMA3 = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
SHAPES = {
    "d64-llama3": (dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                        head_dim=64), dict(LLAMA3, factor=32.0)),
    "d64-default": (dict(hidden_size=2048, intermediate_size=8192, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64), {"rope_type": "default", "rope_theta": 500000.0}),
    "d128-llama3": (dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=128), dict(LLAMA3, factor=8.0)),
}
LENGTHS = [8, 64, 65, 200, 700, 1500]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--rope-bf16", action="store_true", help="convert with model.to(bf16) (rounds inv_freq)")
    a = ap.parse_args()
    import torch
    import transformers as tf
    os.makedirs(a.dir, exist_ok=True)
    rng = random.Random(7)
    seqs = [[rng.randrange(3, 128000) for _ in range(L)] for L in LENGTHS]
    sp = os.path.join(a.dir, "seqs.bin")
    with open(sp, "wb") as f:
        f.write(b"VRSEQ1\0\0" + struct.pack("<I", len(seqs)) + struct.pack("<%dI" % len(seqs), *map(len, seqs)))
        for s in seqs:
            f.write(struct.pack("<%di" % len(s), *s))
    for name, (dims, rope) in SHAPES.items():
        if a.only and name not in a.only.split(","):
            continue
        cfg = tf.LlamaConfig(vocab_size=128256, num_hidden_layers=a.layers, max_position_embeddings=131072,
                             rms_norm_eps=1e-5, pad_token_id=128004, num_labels=1, rope_parameters=dict(rope), **dims)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = tf.LlamaForSequenceClassification(cfg)
        if a.rope_bf16:  # what model.to(bf16) does: RoPE inv_freq rounded to bf16 too
            model = model.to(torch.bfloat16).eval()
        else:  # parameters to bf16, inv_freq stays fp32 (as from_pretrained(dtype=bf16) leaves it)
            for prm in model.parameters():
                prm.data = prm.data.to(torch.bfloat16)
            model = model.eval()
        print(name, "inv_freq dtype", [b.dtype for n, b in model.named_buffers() if "inv_freq" in n][:1])
        path = os.path.join(a.dir, name)
        shutil.rmtree(path, ignore_errors=True)
        model.save_pretrained(path)
        with torch.inference_mode():
            tf16 = [float(model(input_ids=torch.tensor([s], device="cuda")).logits[0, 0]) for s in seqs]
            model = model.float()
            ref = [float(model(input_ids=torch.tensor([s], device="cuda")).logits[0, 0]) for s in seqs]
        del model
        torch.cuda.empty_cache()
        ours = {}
        for dev in ("cuda:0", "cpu"):
            out = os.path.join(a.dir, f"{name}-{dev.replace(':', '')}.json")
            p = subprocess.run([a.runner, "--model", path, "--device", dev, "--max-batch-tokens", "4096",
                                "--warmup", "0", "--iters", "1", "--seqs", sp, "--out", out],
                               capture_output=True, text=True)
            ours[dev] = json.load(open(out))["scores"] if p.returncode == 0 else [float("nan")] * len(seqs)
            if p.returncode:
                print(p.stderr[-1500:])
        print(f"== {name}, {a.layers} layers: len, fp32 ref, tf bf16, ours cuda, ours cpu")
        for i, s in enumerate(seqs):
            print(f"  {len(s):5d} {ref[i]:+.5f} {tf16[i]:+.5f} {ours['cuda:0'][i]:+.5f} {ours['cpu'][i]:+.5f}")
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
