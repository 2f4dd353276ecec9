"""A tokenizing front for verl-reward-server's framework routes.

    python3 -m verl_reward.openrlhf_bridge --service-url http://rm-host:8080 --rm-tokenizer /models/rm --port 5000

verl-reward-server answers the framework request shapes itself, on its own port: vLLM
POST /classify, SGLang POST /v1/classify and /v1/embeddings, OpenRLHF POST /get_reward, TEI
POST /predict and GET /info, GET /v1/models (reward_server/vr_http_compat.c; docs/protocol.md).
That is the one implementation of each route: point the framework at the server. The server
encodes texts with its model directory's tokenizer; one without tokenizer files answers 400
naming the field. This bridge is for that case: it forwards every request to the same path on
the server and,
given --rm-tokenizer, first turns the texts of the body into token ids with that tokenizer
(transformers; a path or hub name):

  /classify, /v1/classify, /v1/embeddings   "input": str | [str] -> [[int]], encoded with the
                        tokenizer's special tokens unless the body says "add_special_tokens":
                        false (vLLM's field and default)
  /get_reward           adds "input_ids": each query encoded with add_special_tokens=False
                        (OpenRLHF decodes the query with its special tokens), and
                        "data_source" (--data-source) for the server's rule components
  /predict              adds "input_ids", one per text (TEI encodes with special tokens)

Everything else (other bodies, GET routes, bodies without texts) is forwarded unchanged; the
server's answer (status, Content-Type, body) comes back unchanged, errors included.
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .http import HttpRewardClient
from .service import load_tokenizer

_MAX_BODY = 64 << 20


def _encode(tok, text, special):
    return list(tok.encode(text, add_special_tokens=special))


def rewrite(path, doc, tok, data_source=None):
    """The body the server gets: texts of `doc` replaced by / completed with token ids of
    `tok` (None: unchanged). Shapes it does not know are left for the server to judge."""
    if not isinstance(doc, dict):
        return doc
    doc = dict(doc)
    if path == "/get_reward":
        if data_source is not None and "data_source" not in doc:
            doc["data_source"] = data_source
        q = doc.get("query")
        if tok is not None and "input_ids" not in doc and isinstance(q, list) and all(isinstance(x, str) for x in q):
            doc["input_ids"] = [_encode(tok, x, False) for x in q]
        return doc
    if tok is None:
        return doc
    if path in ("/classify", "/v1/classify", "/v1/embeddings"):
        x = doc.get("input")
        special = doc.get("add_special_tokens", True) is not False
        if isinstance(x, str):
            doc["input"] = [_encode(tok, x, special)]
        elif isinstance(x, list) and x and all(isinstance(t, str) for t in x):
            doc["input"] = [_encode(tok, t, special) for t in x]
        doc.pop("add_special_tokens", None)
    elif path == "/predict" and "input_ids" not in doc:
        x = doc.get("inputs")
        if isinstance(x, str):
            doc["input_ids"] = [_encode(tok, x, True)]
        elif isinstance(x, list) and x and all(isinstance(t, str) for t in x) and len(x) == 1:
            doc["input_ids"] = [_encode(tok, x[0], True)]          # [str] is one text (a pair is refused)
        elif isinstance(x, list) and x and all(isinstance(t, list) and len(t) == 1 and isinstance(t[0], str)
                                               for t in x):
            doc["input_ids"] = [_encode(tok, t[0], True) for t in x]
    return doc


def make_handler(client, tok=None, data_source=None):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "verl-reward-bridge"

        def log_message(self, fmt, *args):      # quiet; errors go back in the body
            pass

        def _send(self, code, body, ctype="application/json"):
            self.send_response(code)
            self.send_header("Content-Type", ctype or "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self, method, body=b"", ctype="application/json"):
            try:
                code, raw, rtype = client.request_raw(method, self.path, body if method == "POST" else None, ctype)
            except Exception as e:      # noqa: BLE001 - the server is unreachable: say so, 503
                msg = json.dumps({"error": {"code": "VR_ERR_SERVER_GONE", "status": -5,
                                            "message": "verl-reward-server at %s: %s" % (client.url, e)}})
                return self._send(503, msg.encode("utf-8"))
            return self._send(code, raw, rtype)

        def do_GET(self):
            self._forward("GET")

        def do_POST(self):
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                n = -1
            if not 0 <= n <= _MAX_BODY:
                body = json.dumps({"error": {"code": "VR_ERR_TOO_LARGE", "status": -8,
                                             "message": "bad or too large Content-Length (limit %d)" % _MAX_BODY}})
                return self._send(413, body.encode("utf-8"))
            raw = self.rfile.read(n)
            path = self.path.split("?", 1)[0]
            try:
                doc = json.loads(raw.decode("utf-8")) if raw else None
            except (ValueError, UnicodeDecodeError):
                doc = None                   # not JSON: the server's parser names the problem
            if doc is not None:
                new = rewrite(path, doc, tok, data_source)
                if new is not doc:
                    raw = json.dumps(new).encode("utf-8")
            self._forward("POST", raw, self.headers.get("Content-Type") or "application/json")

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024       # listen backlog: trainers open many connections at once (default 5)


class Bridge:
    """The bridge on (host, port) (port 0: a free one, see .port) in front of the server at
    service_url, serving on a daemon thread until close(). rm_tokenizer: a tokenizer object or
    a path / hub name (transformers), or None (forward only)."""

    def __init__(self, service_url, rm_tokenizer=None, host="127.0.0.1", port=5000, data_source=None,
                 timeout_s=60.0):
        self.client = HttpRewardClient(service_url, timeout_s=timeout_s)
        tok = load_tokenizer(rm_tokenizer)
        self.httpd = _Server((host, port), make_handler(self.client, tok, data_source))
        self.port = self.httpd.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="verl-reward-bridge", daemon=True)
        self._thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join()
        self.client.close()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m verl_reward.openrlhf_bridge", description=__doc__.split("\n")[0])
    ap.add_argument("--service-url", required=True, help="the server's HTTP address (http://host:port)")
    ap.add_argument("--rm-tokenizer", default=None, help="reward model tokenizer (path / hub name) for texts")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    ap.add_argument("--data-source", default=None, help="data_source given to the server's rule components")
    ap.add_argument("--timeout-s", type=float, default=60.0)
    a = ap.parse_args(argv)
    b = Bridge(a.service_url, a.rm_tokenizer, a.host, a.port, a.data_source, a.timeout_s)
    print("verl-reward bridge on %s -> %s" % (b.url, a.service_url), flush=True)
    try:
        b._thread.join()
    except KeyboardInterrupt:
        b.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
