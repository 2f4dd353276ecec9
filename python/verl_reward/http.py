"""HttpRewardClient: the RewardClient API over the server's HTTP front.

    POST {url}/v1/score  {"input_ids": [[...], ...], "extras": [{...}|null, ...]}
      (the server also takes {"input_ids": [...]}, one sequence; this client sends lists;
      score_text_with_info sends {"text": [...]}, score_messages_with_info
      {"messages": [[{role, content}, ...], ...], "add_generation_prompt": bool}:
      the server tokenises those with the served model directory's tokenizer)
      -> {"scores": [...], "queue_us": n, "compute_us": n, "components": {name: [...]}}

Bodies are msgpack (application/msgpack both ways) when the msgpack package is importable
(verl_reward.msgpack.BACKEND == "msgpack"), else JSON. For trainers on another host.
Standard library only besides that (http.client): each thread
keeps one persistent (keep-alive) connection to the server and reuses it; a reused
connection that turns out closed is replaced once before the error counts. Errors: the server's JSON error body carries a vr_status_t code,
mapped to the same exceptions as the shm client; connection refused / reset
raise ServerGone, a socket timeout raises Timeout.
"""

import concurrent.futures
import json
import socket
import struct
import threading
import http.client
import urllib.error
import urllib.parse
import urllib.request

from . import msgpack
from ._batch import extras_list, pack_sequences
from .client import ScoreResult
from .errors import STATUS_VALUES, VerlRewardError, error_for

_HTTP_STATUS_CODES = {
    400: STATUS_VALUES["VR_ERR_MALFORMED"],
    404: STATUS_VALUES["VR_ERR_NOT_FOUND"],
    408: STATUS_VALUES["VR_ERR_TIMEOUT"],
    413: STATUS_VALUES["VR_ERR_TOO_LARGE"],
    429: STATUS_VALUES["VR_ERR_OVERLOADED"],
    503: STATUS_VALUES["VR_ERR_SHUTTING_DOWN"],
    504: STATUS_VALUES["VR_ERR_TIMEOUT"],
}
_INTERNAL = STATUS_VALUES["VR_ERR_INTERNAL"]
_INVAL = STATUS_VALUES["VR_ERR_INVAL"]
_MALFORMED = STATUS_VALUES["VR_ERR_MALFORMED"]


def _f32(x):
    """The server's scores are float32 printed with 9 significant digits; rounding the
    parsed value back to float32 gives the same Python float as the shm client."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def _jsonable(v):
    """json.dumps default=: numpy/torch values and bytes."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if hasattr(v, "item"):
        return v.item()
    if isinstance(v, (bytes, bytearray)):
        return list(v)
    raise TypeError("cannot send %s as JSON" % type(v).__name__)


def _error_from_body(http_status, body):
    """The exception for a non-2xx answer. The server's body is
    {"error": {"code": "VR_ERR_...", "status": -11, "message": "...", "sequence": 3}};
    its status wins over the HTTP status code."""
    code = _HTTP_STATUS_CODES.get(http_status, _INTERNAL)
    message = "HTTP %d" % http_status
    bad_seq = -1
    try:
        doc = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        doc = None
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, str):
            message = "HTTP %d: %s" % (http_status, err)
            err = doc
        if isinstance(err, dict):
            if isinstance(err.get("status"), int) and err["status"] < 0:
                code = err["status"]
            elif isinstance(err.get("code"), int) and err["code"] < 0:
                code = err["code"]
            elif isinstance(err.get("code"), str) and err["code"] in STATUS_VALUES:
                code = STATUS_VALUES[err["code"]]
            text = err.get("message") or err.get("detail")
            if isinstance(text, str):
                message = "HTTP %d: %s" % (http_status, text)
            for key in ("sequence", "bad_seq"):
                if isinstance(err.get(key), int):
                    bad_seq = err[key]
                    break
    elif body:
        message = "HTTP %d: %s" % (http_status, body[:200].decode("utf-8", "replace"))
    return error_for(code, message, bad_seq)


class HttpPendingScore:
    """Same contract as PendingScore, backed by a worker thread."""

    def __init__(self, future, timeout_s):
        self._future = future
        self._timeout_s = timeout_s

    def done(self):
        return self._future.done()

    def result(self, timeout=None):
        if timeout is None:
            timeout = self._timeout_s
        try:
            return self._future.result(None if timeout < 0 else timeout)
        except concurrent.futures.TimeoutError:
            raise error_for(STATUS_VALUES["VR_ERR_TIMEOUT"],
                            "no HTTP answer within %.3f s (still pending)" % timeout) from None

    def scores(self, timeout=None):
        return self.result(timeout).scores


def check_conversation(conv, i):
    """One chat conversation -> a list of {"role": str, "content": str} dicts (copied), or
    InvalidRequest naming conversation i and the bad message."""
    if isinstance(conv, (str, bytes, dict)) or not hasattr(conv, "__iter__"):
        raise error_for(_INVAL, "conversation %d must be a list of {role, content} messages, not %s"
                        % (i, type(conv).__name__), i)
    out = []
    for j, m in enumerate(conv):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise error_for(_INVAL, "conversation %d, message %d: expected {\"role\": str, \"content\": str}, got %r"
                            % (i, j, m if not isinstance(m, dict) else {k: type(v).__name__ for k, v in m.items()}), i)
        out.append({"role": m["role"], "content": m["content"]})
    return out


def normalize_url(url):
    """The server's base URL: "http://host:port", "host:port", "localhost:8080/" (http://
    assumed, trailing slashes dropped). https is refused: the server speaks plain HTTP
    (put a TLS proxy in front and give its http:// address, or tunnel)."""
    if not isinstance(url, str) or not url.strip():
        raise ValueError("url must be a non-empty string like \"http://127.0.0.1:8080\" or \"127.0.0.1:8080\"")
    u = url.strip()
    scheme, sep, rest = u.partition("://")
    if not sep:
        scheme, rest = "http", u
    scheme = scheme.lower()
    if scheme == "https":
        raise ValueError("%r: the reward server speaks plain HTTP, not https; use http://%s" % (url, rest.rstrip("/")))
    if scheme != "http":
        raise ValueError("%r: unsupported scheme %r (the reward server speaks http)" % (url, scheme))
    rest = rest.rstrip("/")
    if not rest or rest.startswith("/"):
        raise ValueError("%r: no host (expected \"host:port\")" % url)
    return "http://" + rest


class HttpRewardClient:
    """url: the server's base URL, e.g. "http://10.0.0.5:8700" or "10.0.0.5:8700"
    (http:// assumed; https is refused with ValueError). timeout_s bounds
    each request. max_workers: threads used by submit()."""

    def __init__(self, url, timeout_s=30.0, max_workers=4):
        self.url = normalize_url(url)
        self.timeout_s = float(timeout_s)
        self._max_workers = max_workers
        self._pool = None
        self._pool_lock = threading.Lock()
        self._closed = False
        parts = urllib.parse.urlsplit(self.url)
        self._host, self._port = parts.hostname, parts.port or 80
        self._prefix = parts.path.rstrip("/")
        self._local = threading.local()
        self._conns = set()          # every thread's connection, closed by close()

    def _connection(self):
        """This thread's connection -> (conn, reused)."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            return c, True
        c = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_s)
        self._local.conn = c
        with self._pool_lock:
            self._conns.add(c)
        return c, False

    def _drop_connection(self, c):
        self._local.conn = None
        with self._pool_lock:
            self._conns.discard(c)
        c.close()

    def _request(self, path, body, ctype="application/json", method="POST"):
        """POST body to path on this thread's connection -> (http status, raw body, content type)."""
        for attempt in (0, 1):
            c, reused = self._connection()
            try:
                c.request(method, self._prefix + path, body=body,
                          headers={"Content-Type": ctype, "Accept": ctype} if body is not None else {})
                r = c.getresponse()
                raw = r.read()
                if r.will_close:
                    self._drop_connection(c)
                return r.status, raw, r.getheader("Content-Type") or ""
            except (socket.timeout, TimeoutError):
                self._drop_connection(c)
                raise error_for(STATUS_VALUES["VR_ERR_TIMEOUT"],
                                "no HTTP answer from %s within %.3f s" % (self.url, self.timeout_s)) from None
            except (http.client.HTTPException, ConnectionError, OSError) as e:
                self._drop_connection(c)
                if reused and attempt == 0:
                    continue             # the server closed an idle keep-alive connection
                raise error_for(STATUS_VALUES["VR_ERR_SERVER_GONE"],
                                "cannot reach %s: %s" % (self.url, e)) from None
        raise AssertionError("unreachable")

    def ready(self):
        """True when GET /ready answers 200."""
        try:
            with urllib.request.urlopen(self.url + "/ready", timeout=self.timeout_s) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def score_with_info(self, sequences, extras=None):
        """Synchronous score -> ScoreResult (scores, components, timings)."""
        if self._closed:
            raise VerlRewardError(STATUS_VALUES["VR_ERR_CANCELLED"], "HttpRewardClient is closed")
        return self._score(sequences, extras)

    def _score(self, sequences, extras):
        ids, cu = pack_sequences(sequences)
        n = len(cu) - 1
        if n == 0:
            return ScoreResult([], {}, 0, 0)
        return self._post({"input_ids": [ids[cu[i]:cu[i + 1]].tolist() for i in range(n)]}, n, extras)

    def score_text_with_info(self, texts, extras=None):
        """Scores raw texts that the server tokenises with the served model's own tokenizer:
        POST /v1/score {"text": [...]} (needs a model directory with a tokenizer on the
        server side). texts: a list of str -> ScoreResult."""
        if self._closed:
            raise VerlRewardError(STATUS_VALUES["VR_ERR_CANCELLED"], "HttpRewardClient is closed")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise error_for(_INVAL, "texts[%d] must be a str, not %s" % (i, type(t).__name__), i)
        if not texts:
            return ScoreResult([], {}, 0, 0)
        return self._post({"text": texts}, len(texts), extras)

    def score_messages_with_info(self, conversations, extras=None, add_generation_prompt=False):
        """Scores chat conversations that the server renders with the served model's chat
        template: POST /v1/score {"messages": [[{"role", "content"}, ...], ...],
        "add_generation_prompt": bool} -> ScoreResult."""
        if self._closed:
            raise VerlRewardError(STATUS_VALUES["VR_ERR_CANCELLED"], "HttpRewardClient is closed")
        convs = [check_conversation(c, i) for i, c in enumerate(conversations)]
        if not convs:
            return ScoreResult([], {}, 0, 0)
        return self._post({"messages": convs, "add_generation_prompt": bool(add_generation_prompt)},
                          len(convs), extras)

    def _post(self, doc, n, extras):
        ex = extras_list(extras, n, dict, "a dict (HTTP sends JSON)")
        if ex is not None:
            doc["extras"] = ex
        try:
            if msgpack.BACKEND == "msgpack":
                body, ctype = msgpack.packb(doc), "application/msgpack"
            else:
                body, ctype = json.dumps(doc, default=_jsonable).encode("utf-8"), "application/json"
        except (TypeError, ValueError, OverflowError) as e:
            raise error_for(_INVAL, "extras not serialisable: %s" % e) from None
        status, raw, rtype = self._request("/v1/score", body, ctype)
        if not 200 <= status < 300:
            raise _error_from_body(status, raw or b"")
        return self._parse(raw, n, rtype)

    def request_raw(self, method, path, body=None, ctype="application/json"):
        """`method` (GET / POST) any path of the server on this thread's keep-alive connection
        -> (http status, raw body, content type); no error mapping (the bridge forwards)."""
        if self._closed:
            raise VerlRewardError(STATUS_VALUES["VR_ERR_CANCELLED"], "HttpRewardClient is closed")
        return self._request(path, body, ctype, method)

    def _parse(self, raw, n, rtype="application/json"):
        try:
            if "msgpack" in rtype:
                doc = msgpack.unpackb(raw)
            else:
                doc = json.loads(raw.decode("utf-8"))
            errors = doc.get("errors") or []
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, OverflowError, AttributeError) as e:
            raise error_for(_MALFORMED, "bad answer from %s: %s" % (self.url, e)) from None
        # per-sequence errors (a score the model could not give): raised as over shm, for the
        # first sequence at fault
        for i, e in enumerate(errors if isinstance(errors, list) else []):
            if isinstance(e, dict) and isinstance(e.get("status"), int) and e["status"] < 0:
                raise error_for(e["status"], "sequence %d: %s" % (i, e.get("message", "")), bad_seq=i)
        try:
            scores = [_f32(x) for x in doc["scores"]]
        except (ValueError, KeyError, TypeError, OverflowError) as e:
            raise error_for(_MALFORMED, "bad answer from %s: %s" % (self.url, e)) from None
        if len(scores) != n:
            raise error_for(_MALFORMED, "server sent %d scores for %d sequences" % (len(scores), n))
        comps = {}
        raw_comps = doc.get("components") or {}
        if isinstance(raw_comps, dict):
            for name, vals in raw_comps.items():
                if isinstance(vals, list) and len(vals) == n:
                    try:
                        comps[str(name)] = [_f32(v) for v in vals]
                    except (TypeError, ValueError, OverflowError):
                        raise error_for(_MALFORMED, "bad component %r from %s" % (name, self.url)) from None
        return ScoreResult(scores, comps, int(doc.get("queue_us", 0) or 0),
                           int(doc.get("compute_us", 0) or 0))

    def score(self, sequences, extras=None):
        """-> list[float]; same arguments as RewardClient.score (extras: dicts or None)."""
        return self.score_with_info(sequences, extras).scores

    def submit(self, sequences, extras=None):
        """-> HttpPendingScore; the request runs on a worker thread."""
        with self._pool_lock:
            if self._closed:
                raise VerlRewardError(STATUS_VALUES["VR_ERR_CANCELLED"], "HttpRewardClient is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self._max_workers,
                                                                   thread_name_prefix="verl-reward-http")
            fut = self._pool.submit(self._score, sequences, extras)
        return HttpPendingScore(fut, self.timeout_s)

    async def score_async(self, sequences, extras=None):
        """await -> ScoreResult: the request runs on the client's worker pool (max_workers
        threads in all, not one per call; each keeps its connection)."""
        import asyncio
        return await asyncio.wrap_future(self.submit(sequences, extras)._future)

    def close(self):
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._pool_lock:
            conns, self._conns = self._conns, set()
        for c in conns:
            c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
