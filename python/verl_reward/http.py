"""HttpRewardClient: the RewardClient API over the server's HTTP front.

    POST {url}/v1/score  {"input_ids": [[...], ...], "extras": [{...}|null, ...]}
      (the server also takes {"input_ids": [...]}, one sequence; this client sends lists)
      -> {"scores": [...], "queue_us": n, "compute_us": n, "components": {name: [...]}}

For trainers on another host. Standard library only (urllib); one connection
per request. Errors: the server's JSON error body carries a vr_status_t code,
mapped to the same exceptions as the shm client; connection refused / reset
raise ServerGone, a socket timeout raises Timeout.
"""

import concurrent.futures
import json
import socket
import struct
import threading
import urllib.error
import urllib.request

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
        doc = {"input_ids": [ids[cu[i]:cu[i + 1]].tolist() for i in range(n)]}
        ex = extras_list(extras, n, dict, "a dict (HTTP sends JSON)")
        if ex is not None:
            doc["extras"] = ex
        try:
            body = json.dumps(doc, default=_jsonable).encode("utf-8")
        except (TypeError, ValueError) as e:
            raise error_for(_INVAL, "extras not JSON-serialisable: %s" % e) from None
        req = urllib.request.Request(self.url + "/v1/score", data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise _error_from_body(e.code, e.read() or b"") from None
        except (socket.timeout, TimeoutError):
            raise error_for(STATUS_VALUES["VR_ERR_TIMEOUT"],
                            "no HTTP answer from %s within %.3f s" % (self.url, self.timeout_s)) from None
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            reason = getattr(e, "reason", e)
            if isinstance(reason, (socket.timeout, TimeoutError)):
                raise error_for(STATUS_VALUES["VR_ERR_TIMEOUT"],
                                "no HTTP answer from %s within %.3f s" % (self.url, self.timeout_s)) from None
            raise error_for(STATUS_VALUES["VR_ERR_SERVER_GONE"],
                            "cannot reach %s: %s" % (self.url, reason)) from None
        return self._parse(raw, n)

    def _parse(self, raw, n):
        try:
            doc = json.loads(raw.decode("utf-8"))
            errors = doc.get("errors") or []
        except (ValueError, UnicodeDecodeError, AttributeError) as e:
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

    def close(self):
        with self._pool_lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
