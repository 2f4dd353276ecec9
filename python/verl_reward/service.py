"""RewardService: one process's batched way to the server, shared by the framework adapters.

Holds the settings every adapter takes (shm_name or service_url, timeouts, batching)
and one MicroBatcher per input form:
  - "ids": token-id sequences (shared memory or HTTP {"input_ids"});
  - "text": raw texts: over HTTP sent as {"text": [...]} for the server to tokenise
    with the served model's tokenizer; over shared memory tokenised here with
    rm_tokenizer (a transformers tokenizer, a path for AutoTokenizer, or the project's
    own verl_reward.text.RmTokenizer: rm_tokenizer_dir in the adapters' settings);
  - "messages": chat conversations: over HTTP sent as {"messages": [...]} for the
    server's chat template; over shared memory rendered here with rm_tokenizer's chat
    template the way verl renders reward-model input (see render_chat).

    svc = RewardService.get(shm_name="verl_reward_shm")       # cached per process + settings
    fut = svc.submit("ids", [1, 2, 3], {"ground_truth": "42"})
    score, components = await svc.score_async("messages", [{"role": "user", ...}, ...])

Connections come from verl_adapter.get_client (one per process, reconnecting once after
a server restart). Thread-safe; services are never closed before process exit (their
sender threads are daemons).
"""

import os
import threading

from .batcher import MicroBatcher
from .errors import STATUS_VALUES, InvalidRequest

_INVAL = STATUS_VALUES["VR_ERR_INVAL"]
FORMS = ("ids", "text", "messages")

_tokenizers = {}
_tok_lock = threading.Lock()


def load_tokenizer(tok, what="rm_tokenizer"):
    """A tokenizer object (returned as is), None, or a path / hub name loaded once per
    process with transformers.AutoTokenizer (ImportError-free message when missing)."""
    if tok is None or not isinstance(tok, str):
        return tok
    with _tok_lock:
        if tok not in _tokenizers:
            try:
                from transformers import AutoTokenizer     # only when a tokenizer path is given
            except ImportError:
                raise InvalidRequest(_INVAL, "%s=%r needs the transformers package (pip install transformers) "
                                     "or a tokenizer object" % (what, tok)) from None
            _tokenizers[tok] = AutoTokenizer.from_pretrained(tok)
        return _tokenizers[tok]


def rm_tokenizer_from(rm_tokenizer=None, rm_tokenizer_dir=None):
    """The adapters' rm_tokenizer setting: rm_tokenizer_dir (a reward model / tokenizer directory)
    selects the project's own tokenizer (verl_reward.text.RmTokenizer: libverl_reward_text, no
    transformers, the server's HTTP text-path ids); else rm_tokenizer as given (a transformers
    tokenizer object, or a path / hub name for AutoTokenizer, or None)."""
    if rm_tokenizer_dir:
        from . import text
        return text.load(rm_tokenizer_dir)
    return rm_tokenizer


def render_chat(rm_tokenizer, messages, add_generation_prompt=False):
    """messages -> token ids of the reward model's input, as verl builds it for a
    discriminative RM (verl/experimental/reward_loop/reward_loop.py,
    RewardLoopWorker._preprocess_reward_inputs, v0.7.1-v0.9.0): the chat template
    rendered as text (tokenize=False), a leading BOS text removed, then tokenised with
    the tokenizer's default special tokens (what vLLM's /classify does with that text)."""
    text = rm_tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt,
                                            tokenize=False)
    bos = getattr(rm_tokenizer, "bos_token", None)
    if bos and text.startswith(bos):
        text = text[len(bos):]
    return list(rm_tokenizer.encode(text))


class RewardService:
    """Settings: shm_name / service_url (default as verl_adapter.get_client: env
    VERL_REWARD_SERVICE_URL, VERL_REWARD_SHM_NAME, "verl_reward_shm"), timeout_s,
    connect_timeout_s, max_batch, linger_ms, max_inflight, rm_tokenizer (for text and
    messages over shared memory), add_special_tokens (text form over shm)."""

    _cache = {}
    _cache_lock = threading.Lock()

    def __init__(self, shm_name=None, service_url=None, timeout_s=60.0, connect_timeout_s=30.0,
                 max_batch=256, linger_ms=2.0, max_inflight=4, rm_tokenizer=None, add_special_tokens=False):
        self.shm_name = shm_name or None
        self.service_url = service_url or None
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.max_batch = int(max_batch)
        self.linger_s = float(linger_ms) / 1000.0
        self.max_inflight = int(max_inflight)
        self.rm_tokenizer = rm_tokenizer
        self.add_special_tokens = bool(add_special_tokens)
        self._batchers = {}
        self._lock = threading.Lock()

    @classmethod
    def get(cls, rm_tokenizer=None, **settings):
        """The process's service for these settings (a new one after fork). rm_tokenizer
        may be an object (keyed by identity) or a path."""
        key = (os.getpid(), tuple(sorted((k, repr(v)) for k, v in settings.items())),
               rm_tokenizer if isinstance(rm_tokenizer, (str, type(None))) else id(rm_tokenizer))
        with cls._cache_lock:
            svc = cls._cache.get(key)
            if svc is None:
                svc = cls(rm_tokenizer=rm_tokenizer, **settings)
                cls._cache[key] = svc
            return svc

    # -- transport -------------------------------------------------------------
    def _client(self):
        from .verl_adapter import get_client     # late: verl_adapter imports this module
        return get_client(self.shm_name, self.service_url, self.timeout_s, self.connect_timeout_s)

    def is_http(self):
        from .http import HttpRewardClient
        return isinstance(self._client()[0], HttpRewardClient)

    def _tok(self, form):
        tok = load_tokenizer(self.rm_tokenizer)
        if tok is None:
            raise InvalidRequest(_INVAL, "the %s form over shared memory needs rm_tokenizer (the reward model's "
                                 "tokenizer path or object); or use service_url so that the server "
                                 "tokenises" % form)
        return tok

    def to_ids(self, form, item):
        """One text / conversation -> token ids with rm_tokenizer (the shm path)."""
        if form == "text":
            return list(self._tok(form).encode(item, add_special_tokens=self.add_special_tokens))
        if form == "messages":
            return render_chat(self._tok(form), item)
        return item

    def route(self, form, item):
        """-> (form actually sent, item): texts and conversations go to the server as they
        are over HTTP when no rm_tokenizer is set; otherwise they become token ids here."""
        if form not in FORMS:
            raise ValueError("form must be one of %s, got %r" % (FORMS, form))
        if form == "ids" or (self.rm_tokenizer is None and self.is_http()):
            return form, item
        return "ids", self.to_ids(form, item)

    def score_batch(self, form, items, extras=None):
        """Synchronous, unbatched: one request for these items -> ScoreResult."""
        from .verl_adapter import _drop_client
        from .errors import ServerGone
        routed = [self.route(form, it) for it in items]
        form = routed[0][0] if routed else "ids"
        items = [it for _, it in routed]
        for attempt in (0, 1):
            client, key = self._client()
            try:
                if form == "text":
                    return client.score_text_with_info(items, extras)
                if form == "messages":
                    return client.score_messages_with_info(items, extras)
                return client.score_with_info(items, extras)
            except ServerGone:
                _drop_client(key)
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    # -- batched ---------------------------------------------------------------
    def batcher(self, form):
        with self._lock:
            b = self._batchers.get(form)
            if b is None:
                b = MicroBatcher(lambda items, extras, f=form: self.score_batch(f, items, extras),
                                 self.max_batch, self.linger_s, self.max_inflight,
                                 name="verl-reward-%s" % form)
                self._batchers[form] = b
            return b

    def submit(self, form, item, extra=None):
        """-> concurrent.futures.Future of (score, {component: value}). A text or
        conversation to tokenise here is tokenised now (its errors raise here)."""
        form, item = self.route(form, item)
        return self.batcher(form).submit(item, extra)

    async def score_async(self, form, item, extra=None):
        form, item = self.route(form, item)
        return await self.batcher(form).score_async(item, extra)

    def stats(self):
        """{form: (requests sent, items sent)}."""
        with self._lock:
            return {f: (b.batches_sent, b.items_sent) for f, b in self._batchers.items()}
