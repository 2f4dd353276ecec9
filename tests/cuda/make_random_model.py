#!/usr/bin/env python3
"""make_random_model.py: writes a random-weight RobertaForSequenceClassification of the
roberta-base shape (config.json + model.safetensors, bf16) with numpy alone, for the CUDA
backend's shape benchmarks (cuda_bench_runner --shapes) on a machine where building the
model with transformers would cost more time than the benchmark. Weights ~ N(0, 0.02),
LayerNorm weights ~ 1 + N(0, 0.02), biases ~ N(0, 0.02), one output label.
--arch llama: a LlamaForSequenceClassification of the Llama-3.2-1B shape instead (hidden 2048,
16 layers, 32 heads / 8 KV heads of 64, SwiGLU 8192, llama3 RoPE; the vocabulary cut to
--vocab, default 32000 there: the embedding rows a benchmark reads do not depend on it).

usage: make_random_model.py OUT_DIR [--arch roberta|llama] [--layers N] [--hidden N] [--seed 1234]
"""
import argparse
import json
import os
import struct

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", choices=("roberta", "llama"), default="roberta")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--inter", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--max-pos", type=int, default=514)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    llama = a.arch == "llama"
    for k, rob, lla in (("layers", 12, 16), ("hidden", 768, 2048), ("heads", 12, 32), ("inter", 3072, 8192),
                        ("vocab", 50265, 32000)):
        if getattr(a, k) is None:
            setattr(a, k, lla if llama else rob)
    rng = np.random.default_rng(a.seed)
    C, I = a.hidden, a.inter
    tensors = {}

    def rnd(name, shape, mean=0.0):
        x = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02) + np.float32(mean)
        tensors[name] = (x.view(np.uint32) >> 16).astype(np.uint16)  # bf16 by truncation

    if llama:
        rnd_llama(a, rnd)
        return write(a, tensors, llama_config(a))
    p = "roberta.embeddings."
    rnd(p + "word_embeddings.weight", (a.vocab, C))
    rnd(p + "position_embeddings.weight", (a.max_pos, C))
    rnd(p + "token_type_embeddings.weight", (1, C))
    rnd(p + "LayerNorm.weight", (C,), 1.0)
    rnd(p + "LayerNorm.bias", (C,))
    for l in range(a.layers):
        q = "roberta.encoder.layer.%d." % l
        for n in ("query", "key", "value"):
            rnd(q + "attention.self.%s.weight" % n, (C, C))
            rnd(q + "attention.self.%s.bias" % n, (C,))
        rnd(q + "attention.output.dense.weight", (C, C))
        rnd(q + "attention.output.dense.bias", (C,))
        rnd(q + "attention.output.LayerNorm.weight", (C,), 1.0)
        rnd(q + "attention.output.LayerNorm.bias", (C,))
        rnd(q + "intermediate.dense.weight", (I, C))
        rnd(q + "intermediate.dense.bias", (I,))
        rnd(q + "output.dense.weight", (C, I))
        rnd(q + "output.dense.bias", (C,))
        rnd(q + "output.LayerNorm.weight", (C,), 1.0)
        rnd(q + "output.LayerNorm.bias", (C,))
    rnd("classifier.dense.weight", (C, C))
    rnd("classifier.dense.bias", (C,))
    rnd("classifier.out_proj.weight", (1, C))
    rnd("classifier.out_proj.bias", (1,))
    cfg = {
        "architectures": ["RobertaForSequenceClassification"], "model_type": "roberta",
        "vocab_size": a.vocab, "hidden_size": C, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "intermediate_size": I, "hidden_act": "gelu",
        "max_position_embeddings": a.max_pos, "type_vocab_size": 1, "layer_norm_eps": 1e-5,
        "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2,
        "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "torch_dtype": "bfloat16",
    }
    write(a, tensors, cfg)


def rnd_llama(a, rnd):
    C, I, D = a.hidden, a.inter, a.hidden // a.heads
    rnd("model.embed_tokens.weight", (a.vocab, C))
    for l in range(a.layers):
        q = "model.layers.%d." % l
        rnd(q + "self_attn.q_proj.weight", (a.heads * D, C))
        rnd(q + "self_attn.k_proj.weight", (a.kv_heads * D, C))
        rnd(q + "self_attn.v_proj.weight", (a.kv_heads * D, C))
        rnd(q + "self_attn.o_proj.weight", (C, a.heads * D))
        rnd(q + "mlp.gate_proj.weight", (I, C))
        rnd(q + "mlp.up_proj.weight", (I, C))
        rnd(q + "mlp.down_proj.weight", (C, I))
        rnd(q + "input_layernorm.weight", (C,), 1.0)
        rnd(q + "post_attention_layernorm.weight", (C,), 1.0)
    rnd("model.norm.weight", (C,), 1.0)
    rnd("score.weight", (1, C))


def llama_config(a):
    return {
        "architectures": ["LlamaForSequenceClassification"], "model_type": "llama",
        "vocab_size": a.vocab, "hidden_size": a.hidden, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": a.hidden // a.heads,
        "intermediate_size": a.inter, "hidden_act": "silu", "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
        "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "torch_dtype": "bfloat16",
    }


def write(a, tensors, cfg):
    header, off = {}, 0
    for name, t in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    hj = json.dumps(header).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for t in tensors.values():
            f.write(t.tobytes())
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    print("wrote %s: %d tensors, %.1f MB" % (a.out, len(tensors), off / 1e6))


if __name__ == "__main__":
    main()
