"""OpenRLHF, vLLM/SGLang and TEI request shapes in front of verl-reward-server.

    python3 -m verl_reward.openrlhf_bridge --shm-name verl_reward_shm --rm-tokenizer /models/rm --port 5000
    python3 -m verl_reward.openrlhf_bridge --service-url http://rm-host:8080 --port 5000

A small stdlib HTTP server (ThreadingHTTPServer) that answers, through one RewardService
(so concurrent requests are batched together):

  POST /get_reward      OpenRLHF's remote reward model (openrlhf/utils/agent.py,
                        SingleTurnAgentExecutor._fetch_rewards_via_http, v0.11.0):
                        {"query": [text], "prompts": [text], "labels": [...]}
                        -> {"rewards": [float], "scores": [float], "extra_logs": {component: [float]}}
                        (the shape of openrlhf/cli/serve_rm.py). labels become ground_truth
                        and query minus its prompt the solution_str of the server's rule
                        components.
  POST /classify, /v1/classify   vLLM / SGLang classify: {"model", "input": str | [str] |
                        [int] | [[int]]} -> {"id", "object": "list", "created", "model",
                        "data": [{"index", "label", "probs": [score], "num_classes": 1}],
                        "usage": {"prompt_tokens", "total_tokens"}} (what verl's reward loop
                        reads: data[-1]["probs"][-1]).
  POST /v1/embeddings   SGLang-style: {"model", "input": ...} -> {"data": [{"index",
                        "object": "embedding", "embedding": [score]}], ...} (verl reads
                        data[-1]["embedding"][-1]).
  POST /predict         TEI: {"inputs": str | [str]} -> [{"score", "label"}] for one
                        text, [[{"score", "label"}], ...] for a list (pairs are refused).
  GET /info, GET /v1/models, GET /health

Texts are tokenised by rm_tokenizer here (shared memory), or sent as {"text": [...]} to
the server's own tokenizer (service_url without rm_tokenizer). Errors answer
{"error": {"code", "status", "message"}} with 400 (bad request), 413, 429, 503 or 500.
"""

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .errors import STATUS_VALUES, VerlRewardError
from .service import RewardService

_MAX_BODY = 64 << 20
_HTTP_FOR = {"VR_ERR_INVAL": 400, "VR_ERR_MALFORMED": 400, "VR_ERR_TOO_LARGE": 413, "VR_ERR_SEQ_TOO_LONG": 400,
             "VR_ERR_OVERLOADED": 429, "VR_ERR_BUSY": 429, "VR_ERR_SHUTTING_DOWN": 503,
             "VR_ERR_SERVER_GONE": 503, "VR_ERR_TIMEOUT": 504}
_NAMES = {v: k for k, v in STATUS_VALUES.items()}


class BadRequest(Exception):
    pass


def _solution(query, prompt):
    if isinstance(prompt, str) and prompt and query.startswith(prompt):
        return query[len(prompt):]
    return query


def score_many(service, form, items, extras=None):
    """Submits every item at once (they join one batch) -> list of (score, components)."""
    futs = [service.submit(form, it, None if extras is None else extras[i]) for i, it in enumerate(items)]
    return [f.result() for f in futs]


def get_reward(service, doc, data_source=None):
    """OpenRLHF's /get_reward body -> its answer dict (also what reward_func returns)."""
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object with \"query\"")
    queries = doc.get("query")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest("\"query\" must be a list of strings")
    prompts = doc.get("prompts") or [None] * len(queries)
    labels = doc.get("labels") or [None] * len(queries)
    if not isinstance(prompts, list) or len(prompts) != len(queries):
        raise BadRequest("\"prompts\" must be a list as long as \"query\" (%d)" % len(queries))
    if not isinstance(labels, list) or len(labels) != len(queries):
        raise BadRequest("\"labels\" must be a list as long as \"query\" (%d)" % len(queries))
    extras = []
    for q, p, lab in zip(queries, prompts, labels):
        e = {"solution_str": _solution(q, p)}
        if lab is not None:
            e["ground_truth"] = lab if isinstance(lab, (str, int, float)) else json.dumps(lab)
        if data_source is not None:
            e["data_source"] = data_source
        extras.append(e)
    out = score_many(service, "text", queries, extras)
    rewards = [s for s, _ in out]
    names = sorted(out[0][1]) if out else []
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {n: [c.get(n, float("nan")) for _, c in out] for n in names}}


def _inputs(value, what):
    """vLLM/SGLang "input" -> (form, items): str | [str] -> text; [int] | [[int]] -> ids."""
    if isinstance(value, str):
        return "text", [value]
    if isinstance(value, list) and value:
        if all(isinstance(x, str) for x in value):
            return "text", list(value)
        if all(isinstance(x, int) and not isinstance(x, bool) for x in value):
            return "ids", [list(value)]
        if all(isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x)
               for x in value):
            return "ids", [list(x) for x in value]
    raise BadRequest("\"%s\" must be a string, a list of strings, a list of token ids or a list of "
                     "token-id lists" % what)


def classify(service, doc, model_name, embeddings=False):
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object with \"input\"")
    form, items = _inputs(doc.get("input"), "input")
    out = score_many(service, form, items)
    n_tok = sum(len(x) for x in items) if form == "ids" else None
    model = doc.get("model") or model_name
    if embeddings:
        data = [{"index": i, "object": "embedding", "embedding": [s]} for i, (s, _) in enumerate(out)]
    else:
        data = [{"index": i, "label": "LABEL_0", "probs": [s], "num_classes": 1} for i, (s, _) in enumerate(out)]
    return {"id": ("embd-" if embeddings else "classify-") + uuid.uuid4().hex, "object": "list",
            "created": int(time.time()), "model": model, "data": data,
            "usage": {"prompt_tokens": n_tok, "total_tokens": n_tok}}


def predict(service, doc):
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object with \"inputs\"")
    inputs = doc.get("inputs")
    if isinstance(inputs, str):
        return [{"score": score_many(service, "text", [inputs])[0][0], "label": "LABEL_0"}]
    if isinstance(inputs, list) and inputs and all(isinstance(x, str) for x in inputs):
        return [[{"score": s, "label": "LABEL_0"}] for s, _ in score_many(service, "text", inputs)]
    if isinstance(inputs, list) and inputs and all(isinstance(x, list) for x in inputs):
        raise BadRequest("text pairs are not supported (a reward model scores one text)")
    raise BadRequest("\"inputs\" must be a string or a list of strings")


def make_handler(service, model_name="verl-reward", data_source=None):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "verl-reward-bridge"

        def log_message(self, fmt, *args):      # quiet; errors go back in the body
            pass

        def _send(self, code, obj):
            body = json.dumps(obj).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, code, name, message, status=None):
            self._send(code, {"error": {"code": name, "status": status if status is not None
                                        else STATUS_VALUES.get(name, -1), "message": message}})

        def do_GET(self):
            path = self.path.split("?", 1)[0]
            if path == "/health":
                return self._send(200, {"status": "ok"})
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [
                    {"id": model_name, "object": "model", "created": 0, "owned_by": "verl-reward"}]})
            if path == "/info":
                return self._send(200, {"model_id": model_name, "model_type": {"classifier": {
                    "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}}, "version": "verl-reward-bridge"})
            return self._error(404, "VR_ERR_NOT_FOUND", "no route GET %s" % path)

        def do_POST(self):
            path = self.path.split("?", 1)[0]
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                return self._error(400, "VR_ERR_MALFORMED", "bad Content-Length")
            if n > _MAX_BODY:
                return self._error(413, "VR_ERR_TOO_LARGE", "body of %d bytes (limit %d)" % (n, _MAX_BODY))
            try:
                doc = json.loads(self.rfile.read(n).decode("utf-8")) if n else None
            except (ValueError, UnicodeDecodeError) as e:
                return self._error(400, "VR_ERR_MALFORMED", "body is not JSON: %s" % e)
            try:
                if path == "/get_reward":
                    return self._send(200, get_reward(service, doc, data_source))
                if path in ("/classify", "/v1/classify"):
                    return self._send(200, classify(service, doc, model_name))
                if path == "/v1/embeddings":
                    return self._send(200, classify(service, doc, model_name, embeddings=True))
                if path == "/predict":
                    return self._send(200, predict(service, doc))
            except BadRequest as e:
                return self._error(400, "VR_ERR_MALFORMED", str(e))
            except VerlRewardError as e:
                name = _NAMES.get(e.code, "VR_ERR_INTERNAL")
                return self._error(_HTTP_FOR.get(name, 500), name, str(e), e.code)
            return self._error(404, "VR_ERR_NOT_FOUND", "no route POST %s" % path)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024       # listen backlog: trainers open many connections at once (default 5)


class Bridge:
    """The bridge server on (host, port) (port 0: a free one, see .port), serving on a
    daemon thread until close()."""

    def __init__(self, service, host="127.0.0.1", port=5000, model_name="verl-reward", data_source=None):
        self.httpd = _Server((host, port), make_handler(service, model_name, data_source))
        self.port = self.httpd.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="verl-reward-bridge", daemon=True)
        self._thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m verl_reward.openrlhf_bridge", description=__doc__.split("\n")[0])
    ap.add_argument("--shm-name", default=None, help="the server's --shm-name (default verl_reward_shm)")
    ap.add_argument("--service-url", default=None, help="the server's HTTP address instead of shared memory")
    ap.add_argument("--rm-tokenizer", default=None, help="reward model tokenizer (path / hub name) for texts")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    ap.add_argument("--model-name", default="verl-reward", help="model id reported by /v1/models, /info")
    ap.add_argument("--data-source", default=None, help="data_source given to the server's rule components")
    ap.add_argument("--timeout-s", type=float, default=60.0)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--linger-ms", type=float, default=2.0)
    a = ap.parse_args(argv)
    svc = RewardService.get(shm_name=a.shm_name, service_url=a.service_url, rm_tokenizer=a.rm_tokenizer,
                            timeout_s=a.timeout_s, max_batch=a.max_batch, linger_ms=a.linger_ms)
    b = Bridge(svc, a.host, a.port, a.model_name, a.data_source)
    print("verl-reward bridge on %s" % b.url, flush=True)
    try:
        b._thread.join()
    except KeyboardInterrupt:
        b.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
