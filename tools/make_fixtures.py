#!/usr/bin/env python3
"""make_fixtures.py: tiny random-weight Hugging Face reward models plus golden scores.

Two modes:

  make_fixtures.py --out DIR [--only NAME,...]
      Needs torch + transformers. For every architecture/option the C runtime
      supports, builds a tiny random-weight *ForSequenceClassification model,
      saves it with save_pretrained (safetensors) into DIR/models/<name>/, then
      reloads it from disk in float32 (eager attention) and writes
      DIR/models/<name>/golden.json: the token sequences (lengths 1 .. the
      position limit, decoders also with pad_token_id inside), the scores
      transformers computes one sequence at a time (unpadded) and as one
      right-padded batch with an attention mask, and the model's RoPE inv_freq.
      Derived saves (sharded, bf16, f16) name their f32 source in golden.json.

  make_fixtures.py --size base --out DIR
      Standard library only (no torch): writes a roberta-base-shaped
      RobertaForSequenceClassification (125M parameters, f32, pseudo-random
      weights) as config.json + model.safetensors for the CPU benchmark.
      No golden scores; not committed.

golden.json (format "verl-reward-golden", version 1):
  name, architecture, source (f32 model it was derived from, or null),
  weights_dtype ("f32"|"bf16"|"f16"), torch, transformers (versions),
  vocab_size, max_seq_len, pad_token_id (or null),
  sequences [[int]], scores [float] (unpadded, one by one),
  batch_scores [float] or null (right-padded batch; null when the model has no
  pad_token_id: transformers refuses batches > 1 for decoders then),
  rope_inv_freq [float] or null, rope_type, source_scores [float] or null
  (the f32 source model's scores on the same sequences, for bf16/f16 saves).
"""
import argparse
import json
import math
import os
import random
import shutil
import struct
import sys
import traceback

VOCAB = 97       # odd on purpose: catches off-by-one vocabulary checks
HIDDEN = 32
LAYERS = 2


# ---------------------------------------------------------------------------
# --size base: stdlib-only safetensors writer
# ---------------------------------------------------------------------------

def write_safetensors(path, tensors):
    """tensors: list of (name, shape, dtype_str, bytes). Writes one safetensors file."""
    header = {}
    off = 0
    for name, shape, dt, data in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, _, _, data in tensors:
            f.write(data)


def make_base(out):
    """roberta-base shape, pseudo-random f32 weights (a 1M-value pool, strided)."""
    import array
    os.makedirs(out, exist_ok=True)
    V, C, L, I, P = 50265, 768, 12, 3072, 514
    rng = random.Random(1234)
    pool = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(1 << 20)))  # N(0, 0.02)
    pool_bytes = pool.tobytes()
    state = {"pos": 0}

    def rand(shape, shift):
        """Values from the pool (stride varies per tensor); + shift for norm weights."""
        n = 1
        for s in shape:
            n *= s
        chunks = []
        need = n
        while need > 0:
            start = state["pos"] % (1 << 20)
            take = min(need, (1 << 20) - start)
            chunks.append(pool_bytes[start * 4:(start + take) * 4])
            need -= take
            state["pos"] += take * 7 + 13
        data = b"".join(chunks)
        if shift != 0.0:
            a = array.array("f")
            a.frombytes(data)
            data = array.array("f", (x + shift for x in a)).tobytes()
        return data

    t = []
    def add(name, shape, scale, shift=0.0):  # scale: documentation only (pool is N(0, 0.02))
        t.append((name, shape, "F32", rand(shape, shift)))
    pre = "roberta."
    add(pre + "embeddings.word_embeddings.weight", (V, C), 0.02)
    add(pre + "embeddings.position_embeddings.weight", (P, C), 0.02)
    add(pre + "embeddings.token_type_embeddings.weight", (1, C), 0.02)
    add(pre + "embeddings.LayerNorm.weight", (C,), 0.02, 1.0)
    add(pre + "embeddings.LayerNorm.bias", (C,), 0.02)
    for l in range(L):
        p = pre + "encoder.layer.%d." % l
        for n in ("attention.self.query", "attention.self.key", "attention.self.value",
                  "attention.output.dense"):
            add(p + n + ".weight", (C, C), 0.02)
            add(p + n + ".bias", (C,), 0.02)
        add(p + "attention.output.LayerNorm.weight", (C,), 0.02, 1.0)
        add(p + "attention.output.LayerNorm.bias", (C,), 0.02)
        add(p + "intermediate.dense.weight", (I, C), 0.02)
        add(p + "intermediate.dense.bias", (I,), 0.02)
        add(p + "output.dense.weight", (C, I), 0.02)
        add(p + "output.dense.bias", (C,), 0.02)
        add(p + "output.LayerNorm.weight", (C,), 0.02, 1.0)
        add(p + "output.LayerNorm.bias", (C,), 0.02)
    add("classifier.dense.weight", (C, C), 0.02)
    add("classifier.dense.bias", (C,), 0.02)
    add("classifier.out_proj.weight", (1, C), 0.02)
    add("classifier.out_proj.bias", (1,), 0.02)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    cfg = {
        "architectures": ["RobertaForSequenceClassification"], "model_type": "roberta",
        "vocab_size": V, "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": 12,
        "intermediate_size": I, "hidden_act": "gelu", "max_position_embeddings": P,
        "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "bos_token_id": 0,
        "eos_token_id": 2, "num_labels": 1, "id2label": {"0": "LABEL_0"},
        "label2id": {"LABEL_0": 0}, "torch_dtype": "float32",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print("wrote roberta-base-shaped model to", out)


# ---------------------------------------------------------------------------
# tiny fixtures (torch + transformers)
# ---------------------------------------------------------------------------

def expected_inv_freq(head_dim, theta, rope):
    """inv_freq as transformers' rope init functions compute it (float64 here)."""
    inv = [1.0 / (theta ** (i / head_dim)) for i in range(0, head_dim, 2)]
    rt = rope.get("rope_type", "default")
    if rt == "linear":
        inv = [x / rope["factor"] for x in inv]
    elif rt == "llama3":
        f, lo, hi, old = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"], \
            rope["original_max_position_embeddings"]
        lw, hw = old / lo, old / hi
        out = []
        for x in inv:
            wl = 2 * math.pi / x
            y = x / f if wl > lw else x
            if not (wl < hw) and not (wl > lw):
                s = (old / wl - lo) / (hi - lo)
                y = (1 - s) * y / f + s * y
            out.append(y)
        inv = out
    return inv


def specs():
    """name -> dict(kind, cfg kwargs, rope (decoders), derived saves)."""
    common_enc = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                      num_attention_heads=4, intermediate_size=64, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, num_labels=1)
    common_dec = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                      intermediate_size=48, max_position_embeddings=48, num_labels=1,
                      attention_dropout=0.0)
    s = {}
    s["bert"] = dict(kind="bert", cfg=dict(common_enc, max_position_embeddings=40, type_vocab_size=2,
                                           hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=0))
    s["roberta"] = dict(kind="roberta", cfg=dict(common_enc, max_position_embeddings=42,
                                                 type_vocab_size=1, hidden_act="gelu",
                                                 layer_norm_eps=1e-5, pad_token_id=1,
                                                 bos_token_id=0, eos_token_id=2))
    s["xlm_roberta"] = dict(kind="xlm-roberta", cfg=dict(common_enc, max_position_embeddings=36,
                                                         type_vocab_size=1, hidden_act="gelu_new",
                                                         layer_norm_eps=1e-5, pad_token_id=1,
                                                         bos_token_id=0, eos_token_id=2))
    s["llama_gqa"] = dict(kind="llama", cfg=dict(common_dec, num_attention_heads=4,
                                                 num_key_value_heads=2, rms_norm_eps=1e-6,
                                                 pad_token_id=0, tie_word_embeddings=False),
                          rope=dict(rope_type="default", rope_theta=10000.0))
    s["llama_linear_bias"] = dict(kind="llama", cfg=dict(common_dec, num_attention_heads=4,
                                                         num_key_value_heads=4, rms_norm_eps=1e-5,
                                                         pad_token_id=3, attention_bias=True,
                                                         mlp_bias=True),
                                  rope=dict(rope_type="linear", factor=2.0, rope_theta=10000.0))
    s["llama3_mqa"] = dict(kind="llama", cfg=dict(common_dec, num_attention_heads=4,
                                                  num_key_value_heads=1, head_dim=16,
                                                  rms_norm_eps=1e-5, pad_token_id=5),
                           # wavelengths 6.3 (kept), 19.9 (smoothed), 62.8.. (scaled)
                           rope=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                     high_freq_factor=4.0, original_max_position_embeddings=32,
                                     rope_theta=10000.0))
    s["llama_tied"] = dict(kind="llama", cfg=dict(common_dec, num_attention_heads=2,
                                                  num_key_value_heads=2, rms_norm_eps=1e-6,
                                                  pad_token_id=None, tie_word_embeddings=True),
                           rope=dict(rope_type="default", rope_theta=10000.0))
    s["mistral_swa"] = dict(kind="mistral", cfg=dict(common_dec, num_attention_heads=4,
                                                     num_key_value_heads=2, rms_norm_eps=1e-5,
                                                     pad_token_id=0, sliding_window=5,
                                                     tie_word_embeddings=False),
                            rope=dict(rope_type="default", rope_theta=10000.0))
    s["qwen2"] = dict(kind="qwen2", cfg=dict(common_dec, num_attention_heads=4,
                                             num_key_value_heads=2, rms_norm_eps=1e-6,
                                             pad_token_id=7, use_sliding_window=False,
                                             tie_word_embeddings=False),
                      rope=dict(rope_type="default", rope_theta=1000000.0))
    # derived saves of the same weights: name -> (source, how)
    s["llama_gqa_sharded"] = dict(derived=("llama_gqa", "sharded"))
    s["llama_gqa_bf16"] = dict(derived=("llama_gqa", "bf16"))
    s["bert_f16"] = dict(derived=("bert", "f16"))
    s["qwen2_bf16"] = dict(derived=("qwen2", "bf16"))
    return s


def classes(kind):
    import transformers as tf
    return {
        "bert": (tf.BertConfig, tf.BertForSequenceClassification),
        "roberta": (tf.RobertaConfig, tf.RobertaForSequenceClassification),
        "xlm-roberta": (tf.XLMRobertaConfig, tf.XLMRobertaForSequenceClassification),
        "llama": (tf.LlamaConfig, tf.LlamaForSequenceClassification),
        "mistral": (tf.MistralConfig, tf.MistralForSequenceClassification),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForSequenceClassification),
    }[kind]


def build_config(kind, kw, rope, log):
    """Builds the config; for decoders tries transformers 5 rope_parameters, then
    transformers 4 rope_scaling, keeping the form whose model inv_freq matches."""
    Cfg, Model = classes(kind)
    if rope is None:
        return Cfg(**kw), "n/a"
    tries = []
    p5 = dict(rope)
    tries.append(("rope_parameters", dict(kw, rope_parameters=p5)))
    p4 = {k: v for k, v in rope.items() if k != "rope_theta"}
    kw4 = dict(kw, rope_theta=rope["rope_theta"])
    if rope["rope_type"] != "default":
        kw4["rope_scaling"] = p4
    tries.append(("rope_scaling", kw4))
    hd = kw.get("head_dim") or kw["hidden_size"] // kw["num_attention_heads"]
    want = expected_inv_freq(hd, rope["rope_theta"], rope)
    last_err = None
    for style, k in tries:
        try:
            cfg = Cfg(**k)
            m = Model(cfg)
            got = [float(x) for x in m.model.rotary_emb.inv_freq]
            ok = len(got) == len(want) and all(abs(a - b) <= 1e-5 * abs(b) + 1e-12
                                               for a, b in zip(got, want))
            log("  rope style %s: rope_type=%s match=%s" %
                (style, getattr(m.model.rotary_emb, "rope_type", "?"), ok))
            if ok:
                return cfg, style
        except Exception as e:  # try the other form
            last_err = e
            log("  rope style %s failed: %r" % (style, e))
    raise RuntimeError("no config form gives the expected inv_freq (last error %r)" % (last_err,))


def randomize(model, seed):
    """O(1) activations so that parity is a sharp test: every weight random,
    norm weights around 1, biases non-zero."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                fan_in = p.shape[-1]
                scale = 1.0 if "embed" in name.lower() else 1.0 / math.sqrt(fan_in)
                p.copy_(torch.randn(p.shape, generator=g) * scale)
            elif "norm" in name.lower() and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def max_seq_len(kind, cfg):
    if kind in ("roberta", "xlm-roberta"):
        return cfg.max_position_embeddings - cfg.pad_token_id - 1
    return cfg.max_position_embeddings


def make_sequences(kind, cfg, seed):
    rng = random.Random(seed)
    L = max_seq_len(kind, cfg)
    lens = sorted(set(x for x in (1, 2, 3, 4, 5, 6, 7, 9, 12, 16, 23, 31, L - 1, L) if 1 <= x <= L))
    seqs = [[rng.randrange(VOCAB) for _ in range(n)] for n in lens]
    p = cfg.pad_token_id
    if kind in ("roberta", "xlm-roberta"):
        # pad_token_id inside a sequence changes roberta's position ids (cumsum rule)
        seqs += [[0, 11, p, 12, 2], [p], [0, 13, 14, p, p], [p, 20, 21, 22]]
    elif kind != "bert" and p is not None:
        # transformers scores the last token that is not pad_token_id (index 0 if none)
        seqs += [[9, 10, p], [9, p, 10, 11], [p], [p, p, p], [p, 30, 31], [40, p, p, p, p, p]]
    return seqs


def score(model, seqs, pad_value, batch):
    import torch
    with torch.no_grad():
        if not batch:
            out = []
            for s in seqs:
                ids = torch.tensor([s], dtype=torch.long)
                out.append(float(model(input_ids=ids).logits[0, 0]))
            return out
        T = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), T), pad_value, dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, :len(s)] = 1
        logits = model(input_ids=ids, attention_mask=mask).logits
        return [float(x) for x in logits[:, 0]]


def save(model, path, how):
    import copy
    import torch
    kw = {}
    model = copy.deepcopy(model)  # .to() converts in place: keep the f32 source intact
    if how == "sharded":
        kw["max_shard_size"] = "20KB"
    if how == "bf16":
        model = model.to(torch.bfloat16)
    elif how == "f16":
        model = model.to(torch.float16)
    try:
        model.save_pretrained(path, safe_serialization=True, **kw)
    except TypeError:  # transformers 5 may drop safe_serialization (always safetensors)
        model.save_pretrained(path, **kw)
    names = sorted(os.listdir(path))
    if how == "sharded" and "model.safetensors.index.json" not in names:
        raise RuntimeError("sharded save wrote no index: %s" % names)
    if not any(n.endswith(".safetensors") for n in names):
        raise RuntimeError("save_pretrained wrote no safetensors in %s: %s" % (path, names))
    return names


def load_f32(Model, path):
    import torch
    try:
        m = Model.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = Model.from_pretrained(path, torch_dtype=torch.float32, attn_implementation="eager")
    m.eval()
    for p in m.parameters():
        if p.dtype != torch.float32:
            raise RuntimeError("%s: parameter not float32 after load" % path)
    return m


def make_tiny(out, only, log):
    import torch
    import transformers
    torch.manual_seed(0)
    versions = dict(torch=torch.__version__, transformers=transformers.__version__)
    log("torch %s transformers %s python %s" % (versions["torch"], versions["transformers"],
                                                sys.version.split()[0]))
    S = specs()
    built = {}   # name -> (kind, Model, in-memory f32 model, cfg, seqs, scores)
    failures = []
    order = [n for n in S if "derived" not in S[n]] + [n for n in S if "derived" in S[n]]
    for i, name in enumerate(order):
        sp = S[name]
        if only and name not in only and not ("derived" in sp and sp["derived"][0] in only):
            continue
        path = os.path.join(out, "models", name)
        try:
            log("== %s" % name)
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
            source = None
            if "derived" in sp:
                source, how = sp["derived"]
                kind, Model, m, cfg, seqs, src_scores = built[source]
            else:
                how = "f32"
                kind = sp["kind"]
                cfg, style = build_config(kind, sp["cfg"], sp.get("rope"), log)
                Model = classes(kind)[1]
                m = Model(cfg)
                randomize(m, 1000 + i)
                m.eval()
                seqs = make_sequences(kind, cfg, 2000 + i)
                src_scores = None
            files = save(m, path, how)
            log("  files: %s" % files)
            r = load_f32(Model, path)
            one = score(r, seqs, 0, batch=False)
            pad = r.config.pad_token_id
            bat = None
            if pad is not None or kind in ("bert", "roberta", "xlm-roberta"):
                bat = score(r, seqs, pad if pad is not None else 0, batch=True)
                d = max(abs(a - b) for a, b in zip(one, bat))
                log("  one-by-one vs batch max diff %.3g" % d)
            inv = None
            rope_type = None
            if hasattr(r, "model") and hasattr(r.model, "rotary_emb"):
                inv = [float(x) for x in r.model.rotary_emb.inv_freq]
                rope_type = getattr(r.model.rotary_emb, "rope_type", None)
            if source is None:
                built[name] = (kind, Model, m, cfg, seqs, one)
            golden = {
                "format": "verl-reward-golden", "version": 1, "name": name,
                "architecture": type(r).__name__, "source": source,
                "weights_dtype": {"f32": "f32", "sharded": "f32", "bf16": "bf16", "f16": "f16"}[how],
                "torch": versions["torch"], "transformers": versions["transformers"],
                "vocab_size": r.config.vocab_size, "max_seq_len": max_seq_len(kind, r.config),
                "pad_token_id": pad, "rope_type": rope_type, "rope_inv_freq": inv,
                "sequences": seqs, "scores": one, "batch_scores": bat,
                "source_scores": src_scores if source is not None else None,
            }
            with open(os.path.join(path, "golden.json"), "w") as f:
                json.dump(golden, f)
            log("  scores[:4] %s" % ["%.6f" % x for x in one[:4]])
        except Exception:
            failures.append(name)
            log("FAILED %s:\n%s" % (name, traceback.format_exc()))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--size", choices=("tiny", "base"), default="tiny")
    ap.add_argument("--only", default="", help="comma-separated fixture names (tiny)")
    a = ap.parse_args()
    if a.size == "base":
        make_base(a.out)
        return 0
    os.makedirs(a.out, exist_ok=True)
    logf = open(os.path.join(a.out, "make_fixtures.log"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()
    only = set(x for x in a.only.split(",") if x)
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        log("make_fixtures.py: the tiny fixtures need torch + transformers (%s); "
            "--size base needs neither" % e)
        return 2
    failures = make_tiny(a.out, only, log)
    log("failures: %s" % (failures or "none"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
