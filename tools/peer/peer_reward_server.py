#!/usr/bin/env python3
"""The reward server users run today, for side-by-side comparison (issue 10).

A Python HTTP reward server in the style of OpenRLHF's ``serve_rm`` minus tokenisation:
transformers AutoModelForSequenceClassification in bf16 with SDPA attention on one GPU,
token ids in, one right-padded forward per request, JSON out. It speaks the same
``POST /v1/score`` / ``GET /ready`` / ``GET /v1/model`` API as verl-reward-server so that
verl-reward-bench can drive both with identical requests.

    python3 tools/peer/peer_reward_server.py --model DIR --port 8090 [--device cuda:0]

Requests are served by a ThreadingHTTPServer; forwards are serialised by one lock (one
model on one GPU, as a single-worker uvicorn app with a synchronous forward does).
"""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from transformers import AutoModelForSequenceClassification


def build_handler(model, pad_id, device, info, lock):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as uvicorn/aiohttp set it: without it the body (a second small write
        # after the headers) waits for the client's delayed ACK, about 40 ms per response
        disable_nagle_algorithm = True

        def log_message(self, fmt, *args):  # quiet: one line per request would dominate
            pass

        def _reply(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path in ("/health", "/ready"):
                self._reply(200, {"status": "ok"})
            elif self.path == "/v1/model":
                self._reply(200, info)
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self):
            if self.path != "/v1/score":
                self._reply(404, {"error": "not found"})
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n))
                seqs = req["input_ids"]
                if not seqs or any(not s for s in seqs):
                    raise ValueError("empty batch or sequence")
            except Exception as e:  # noqa: BLE001 - report any parse problem to the client
                self._reply(400, {"error": str(e)})
                return
            t0 = time.perf_counter()
            maxlen = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), maxlen), pad_id, dtype=torch.long)
            mask = torch.zeros((len(seqs), maxlen), dtype=torch.long)
            for i, s in enumerate(seqs):
                ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
                mask[i, : len(s)] = 1
            with lock, torch.inference_mode():
                t1 = time.perf_counter()
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
                scores = logits[:, 0].float().cpu().tolist()
                t2 = time.perf_counter()
            self._reply(200, {"scores": scores, "queue_us": int((t1 - t0) * 1e6),
                              "compute_us": int((t2 - t1) * 1e6)})

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8090)
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    t0 = time.time()
    model = AutoModelForSequenceClassification.from_pretrained(
        args.model, dtype=torch.bfloat16, attn_implementation="sdpa").to(args.device).eval()
    cfg = model.config
    pad_id = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    info = {"architecture": cfg.architectures[0] if cfg.architectures else type(model).__name__,
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
            "num_layers": cfg.num_hidden_layers, "dtype": "bf16", "device": args.device,
            "max_positions": cfg.max_position_embeddings}
    # warm-up so the first timed request does not pay for kernel selection
    with torch.inference_mode():
        model(input_ids=torch.ones((1, 16), dtype=torch.long, device=args.device))
    torch.cuda.synchronize()
    print(f"peer: loaded {args.model} in {time.time() - t0:.1f}s, listening on {args.host}:{args.port}",
          flush=True)
    srv = ThreadingHTTPServer((args.host, args.port),
                              build_handler(model, pad_id, args.device, info, threading.Lock()))
    srv.daemon_threads = True
    srv.serve_forever()


if __name__ == "__main__":
    main()
