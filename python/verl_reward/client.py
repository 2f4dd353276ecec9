"""RewardClient: score token sequences through the server's shared-memory segment.

    from verl_reward import RewardClient
    with RewardClient("verl_reward_shm") as rc:
        scores = rc.score([[1, 2, 3], [4, 5]])

Thread-safety: one RewardClient may be used from several threads at once (the
C library serialises lane access with a mutex and waits without holding it;
ctypes releases the GIL during every call). close() waits for calls in
progress to return, then releases the lane; calls after close() raise.
"""

import ctypes
import os
import threading

from . import _lib
from ._batch import pack_extras, pack_sequences
from .errors import STATUS_VALUES, Busy, Timeout, VerlRewardError, error_for

_OK = 0
_TIMEOUT = STATUS_VALUES["VR_ERR_TIMEOUT"]
_CANCELLED = STATUS_VALUES["VR_ERR_CANCELLED"]


class ScoreResult:
    """Scores of one request plus what the server reported beside them.

    scores: list[float]; components: {name: list[float]} (empty when the server
    sent only totals); queue_us / compute_us: the server's timings."""

    __slots__ = ("scores", "components", "queue_us", "compute_us")

    def __init__(self, scores, components, queue_us, compute_us):
        self.scores = scores
        self.components = components
        self.queue_us = queue_us
        self.compute_us = compute_us

    def __repr__(self):
        return "ScoreResult(scores=%r, components=%r, queue_us=%d, compute_us=%d)" % (
            self.scores, self.components, self.queue_us, self.compute_us)


class _CBatch:
    """A vr_batch_t plus the Python objects that own the memory it points to."""

    def __init__(self, seqs, extras):
        self.ids, self.cu = pack_sequences(seqs)
        self.n = len(self.cu) - 1
        self.extras = pack_extras(extras, self.n)
        c = ctypes
        if len(self.ids):
            self.c_ids = (c.c_int32 * len(self.ids)).from_buffer(self.ids)
        else:
            self.c_ids = (c.c_int32 * 1)()
        self.c_cu = (c.c_uint32 * len(self.cu)).from_buffer(self.cu)
        self.batch = _lib.Batch(n_seqs=self.n, token_ids=self.c_ids, cu_seqlens=self.c_cu)
        if self.extras is not None and self.n:
            self.c_extras = (c.c_char_p * self.n)(*self.extras)   # points into the bytes objects
            self.c_extras_len = (c.c_uint32 * self.n)(*[len(e) if e else 0 for e in self.extras])
            self.batch.extras = self.c_extras
            self.batch.extras_len = self.c_extras_len


def _result(n, scores, comps, info):
    n_comp = min(int(info.n_components), _lib.VR_MAX_COMPONENTS)
    components = {}
    for j in range(n_comp):
        name = bytes(info.component_names[j]).split(b"\0", 1)[0].decode("utf-8", "replace")
        components[name] = [float(comps[i * _lib.VR_MAX_COMPONENTS + j]) for i in range(n)]
    return ScoreResult([float(x) for x in scores[:n]], components, int(info.queue_us),
                       int(info.compute_us))


class PendingScore:
    """A submitted request. done() never blocks; result() waits for it.

    A Timeout from result() leaves the request pending (call result() again);
    any other error, or a successful result, finishes it (result() then keeps
    returning / raising the same)."""

    def __init__(self, client, req_id, n_seqs):
        self._client = client
        self._id = req_id
        self._n = n_seqs
        self._lock = threading.Lock()
        self._outcome = None      # ScoreResult or VerlRewardError once finished

    @property
    def request_id(self):
        return self._id

    def done(self):
        """True when result() will not wait (answered, failed, or the client closed)."""
        if self._outcome is not None:
            return True
        rc = self._client._call("vr_client_poll", self._id)
        if rc < 0:
            with self._lock:      # result() may have consumed the id meanwhile
                if self._outcome is None:
                    self._outcome = self._client._error(rc)
            return True
        return rc == 1

    def result(self, timeout=None):
        """-> ScoreResult. timeout in seconds (None: the client's timeout_s; < 0: forever)."""
        with self._lock:
            outcome = self._outcome
            if outcome is None:
                outcome = self._wait(timeout)
                if not isinstance(outcome, Timeout):   # a timeout leaves it pending
                    self._outcome = outcome
        if isinstance(outcome, VerlRewardError):
            raise outcome
        return outcome

    def scores(self, timeout=None):
        """-> list[float] (result().scores)."""
        return self.result(timeout).scores

    def _wait(self, timeout):
        c = ctypes
        if timeout is None:
            timeout = self._client.timeout_s
        timeout_us = -1 if timeout < 0 else int(timeout * 1e6)
        scores = (c.c_float * max(self._n, 1))()
        comps = (c.c_float * (max(self._n, 1) * _lib.VR_MAX_COMPONENTS))()
        info = _lib.RequestInfo()
        try:
            rc = self._client._call("vr_client_wait", self._id, timeout_us, scores, comps,
                                    c.byref(info))
        except VerlRewardError as e:      # client closed
            return e
        if rc != _OK:
            return self._client._error(rc, info)
        return _result(self._n, scores, comps, info)


class RewardClient:
    """Client of one verl-reward-server through its shared-memory segment.

    shm_name: the server's --shm-name: a plain name (its socket NAME.sock in
    socket_dir or the default directory, docs/protocol.md), a socket path, or
    "@NAME" (abstract socket). socket_dir: the server's --shm-socket-dir (None:
    the default directory). timeout_s: default wait for
    score() and PendingScore.result(). connect_timeout_s: how long the
    constructor waits for the segment to appear / a lane to free up (0: fail at
    once). spin_us: busy-poll budget before sleeping (None: library default).
    expected_server_uid: the uid the server must run as (None: this process's
    euid); a server of another uid is refused (ConnectFailed).
    tokenizer: the reward model's tokenizer for score_text / score_messages (a directory,
    loaded with verl_reward.text.load, or an RmTokenizer); None: those raise InvalidRequest.
    Raises ConnectFailed (no such segment, permission, other version),
    ServerGone, NoLane or Timeout; LibraryNotFound when the .so is missing."""

    def __init__(self, shm_name="verl_reward_shm", timeout_s=30.0, connect_timeout_s=0.0,
                 spin_us=None, expected_server_uid=None, tokenizer=None, socket_dir=None):
        self._lib = _lib.load_library()
        self._tokenizer = tokenizer
        self._tok_checked = None
        self.shm_name = shm_name
        self.timeout_s = float(timeout_s)
        opts = _lib.ClientOptions()
        self._lib.vr_client_options_init(ctypes.byref(opts))
        opts.timeout_us = max(1, int(self.timeout_s * 1e6))
        opts.connect_timeout_us = max(0, int(connect_timeout_s * 1e6))
        if spin_us is not None:
            opts.spin_us = int(spin_us)
        if expected_server_uid is not None:
            opts.expected_server_uid = int(expected_server_uid)
        if socket_dir is not None:
            self._socket_dir = os.fsencode(socket_dir)  # kept alive: opts points at it
            opts.socket_dir = self._socket_dir
        self._opts = opts
        self._cond = threading.Condition()
        self._active = 0
        self._handle = None
        handle = ctypes.c_void_p()
        rc = self._lib.vr_client_connect(shm_name.encode("utf-8"), ctypes.byref(opts),
                                         ctypes.byref(handle))
        if rc != _OK:
            raise self._error(rc)
        self._handle = handle

    # -- plumbing --------------------------------------------------------------
    def _error(self, rc, info=None):
        detail = self._lib.vr_client_last_error()
        detail = detail.decode("utf-8", "replace") if detail else ""
        bad = int(info.bad_seq) if info is not None and rc != _TIMEOUT else -1
        return error_for(rc, detail or None, bad)

    def _call(self, fn_name, *args):
        """Calls fn(handle, *args) unless closed (fn_name: a library function's name, or a
        callable taking the handle first); close() waits for calls in flight."""
        with self._cond:
            if self._handle is None:
                raise VerlRewardError(_CANCELLED, "RewardClient(%r) is closed" % self.shm_name)
            self._active += 1
            handle = self._handle
        try:
            fn = getattr(self._lib, fn_name) if isinstance(fn_name, str) else fn_name
            return fn(handle, *args)
        finally:
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()

    # -- API -------------------------------------------------------------------
    def limits(self):
        """The server's published limits as a dict (max_seq_len, max_seqs_per_request,
        arena_bytes, max_inflight, vocab_size, n_lanes)."""
        lim = _lib.Limits()
        rc = self._call("vr_client_limits", ctypes.byref(lim))
        if rc != _OK:
            raise self._error(rc)
        return {name: int(getattr(lim, name)) for name, _ in _lib.Limits._fields_}

    def score_with_info(self, sequences, extras=None):
        """Synchronous score -> ScoreResult (scores, components, timings)."""
        cb = _CBatch(sequences, extras)
        if cb.n == 0:
            return ScoreResult([], {}, 0, 0)
        c = ctypes
        scores = (c.c_float * cb.n)()
        comps = (c.c_float * (cb.n * _lib.VR_MAX_COMPONENTS))()
        info = _lib.RequestInfo()
        rc = self._call("vr_client_score", c.byref(cb.batch), scores, comps, c.byref(info))
        if rc != _OK:
            raise self._error(rc, info)
        return _result(cb.n, scores, comps, info)

    def score(self, sequences, extras=None):
        """Synchronous score -> list[float], one per sequence (waits up to timeout_s).

        sequences: one sequence (a flat list of ints, a 1-D numpy array/torch
        tensor: the answer is a list of one score), or a batch (a list of
        token-id lists / 1-D arrays / 1-D tensors, or one 2-D array/tensor);
        anything else raises TypeError naming these forms. extras: None or one dict/bytes/None per sequence
        (dicts are msgpack-packed; the server's rule rewards read data_source,
        solution_str, ground_truth, extra_info)."""
        return self.score_with_info(sequences, extras).scores

    # -- text (tokenised here: the shm protocol carries ids) -----------------------------------
    @property
    def tokenizer(self):
        """The RmTokenizer of score_text / score_messages (loaded on first use), or None."""
        if self._tokenizer is not None and not hasattr(self._tokenizer, "encode_texts"):
            from . import text
            self._tokenizer = text.load(self._tokenizer)
        return self._tokenizer

    def _text_tokenizer(self):
        tok = self.tokenizer
        if tok is None:
            from .errors import InvalidRequest, STATUS_VALUES as _S
            raise InvalidRequest(_S["VR_ERR_INVAL"], "RewardClient(%r): texts over shared memory are tokenised "
                                 "here: give tokenizer=<the reward model's directory>" % self.shm_name)
        if self._tok_checked is not tok:       # vocabulary against the served model, once
            tok.check(self)
            self._tok_checked = tok
        return tok

    def _score_packed(self, packed, extras):
        from ._batch import PackedSequences
        return self.score_with_info(PackedSequences(*packed), extras)

    def score_text_with_info(self, texts, extras=None, add_special_tokens=True):
        """Texts (str, or bytes taken as UTF-8) tokenised with the reward model's tokenizer as
        tokenizer(text, add_special_tokens=...) (the server's POST /v1/score {"text"} ids) and
        scored over shared memory -> ScoreResult."""
        texts = list(texts)
        if not texts:
            return ScoreResult([], {}, 0, 0)
        return self._score_packed(self._text_tokenizer().encode_texts(texts, add_special_tokens), extras)

    def score_text(self, texts, extras=None, add_special_tokens=True):
        """-> list[float] (score_text_with_info(...).scores)."""
        return self.score_text_with_info(texts, extras, add_special_tokens).scores

    def score_messages_with_info(self, conversations, extras=None, add_generation_prompt=False,
                                 chat_template_kwargs=None):
        """Conversations (lists of {"role", "content"}) rendered with the reward model's chat
        template and tokenised as apply_chat_template(conv, add_generation_prompt=...,
        tokenize=True) (the server's {"messages"} ids), scored over shared memory -> ScoreResult."""
        convs = list(conversations)
        if not convs:
            return ScoreResult([], {}, 0, 0)
        tok = self._text_tokenizer()
        return self._score_packed(tok.encode_conversations(convs, add_generation_prompt, chat_template_kwargs),
                                  extras)

    def score_messages(self, conversations, extras=None, add_generation_prompt=False, chat_template_kwargs=None):
        """-> list[float] (score_messages_with_info(...).scores)."""
        return self.score_messages_with_info(conversations, extras, add_generation_prompt,
                                             chat_template_kwargs).scores

    def submit(self, sequences, extras=None):
        """Asynchronous: copies the batch into the lane and returns a PendingScore at
        once. Busy when too many requests are in flight on this client's lane."""
        cb = _CBatch(sequences, extras)
        req = ctypes.c_uint64()
        rc = self._call("vr_client_submit", ctypes.byref(cb.batch), ctypes.byref(req))
        if rc != _OK:
            raise self._error(rc)
        return PendingScore(self, req.value, cb.n)

    async def score_async(self, sequences, extras=None, timeout=None):
        """await -> ScoreResult, with no thread per call: the request goes into the lane at
        once (retried while the lane is Busy), then the coroutine polls for it, sleeping
        20 us doubling to 1 ms between polls (other coroutines run meanwhile). timeout in
        seconds (None: timeout_s). A Timeout leaves the request pending: the exception's
        `pending` attribute is its PendingScore (wait on it again, or drop it)."""
        import asyncio
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout_s if timeout is None else float(timeout))
        delay = 2e-5
        while True:
            try:
                pending = self.submit(sequences, extras)
                break
            except Busy:
                if loop.time() >= deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1e-3)
        delay = 2e-5
        while not pending.done():
            if loop.time() >= deadline:
                err = error_for(_TIMEOUT, "no answer within the timeout (still pending)")
                err.pending = pending
                raise err
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1e-3)
        return pending.result(0)

    def close(self):
        """Releases the lane (idempotent). Waits for calls in progress on other threads."""
        with self._cond:
            handle, self._handle = self._handle, None
            while self._active:
                self._cond.wait()
        if handle is not None:
            self._lib.vr_client_close(handle)

    @property
    def closed(self):
        return self._handle is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None and getattr(self, "_cond", None) is not None:
            self.close()
