"""The reward model's tokenizer on the client side, for texts over shared memory.

The shared-memory protocol carries token ids only. RmTokenizer wraps libverl_reward_text.so
(include/verl_reward/text.h: the project's C tokenizer and chat-template engine, identical to
Hugging Face transformers) through ctypes, so a trainer scores texts and conversations over
shm without transformers, with the ids the server's HTTP text path gives:

    from verl_reward import RewardClient
    with RewardClient("verl_reward_shm", tokenizer="/models/rm") as rc:
        rc.score_text(["the answer is 4"])
        rc.score_messages([[{"role": "user", "content": "2+2?"},
                            {"role": "assistant", "content": "4"}]])

    tok = verl_reward.text.load("/models/rm")     # one per directory and process
    tok.encode("hi")                              # tokenizer("hi")["input_ids"]
    tok.apply_chat_template(conv)                 # apply_chat_template(conv, tokenize=True)

RmTokenizer also stands in for the transformers tokenizer the framework adapters take as
rm_tokenizer (encode, apply_chat_template, bos_token, len()): reward_kwargs' rm_tokenizer_dir
selects it (docs/operations.md, "Text over shared memory").

Library lookup, first hit wins: $VERL_REWARD_TEXT_LIB (a path to the .so or a directory
holding it; an explicit setting that names nothing is an error), the directory the client
library was loaded from, next to this package, the source checkout's build/lib/, the system
path. The client library is loaded first (libverl_reward_text.so links it).
"""

import ctypes
import ctypes.util
import json
import os
import threading
from array import array

from . import _lib
from .errors import STATUS_VALUES, InvalidRequest, error_for

LIB_BASENAME = "libverl_reward_text.so"
PLAIN, CHAT = 1, 2          # vr_text_input_t
_INVAL = STATUS_VALUES["VR_ERR_INVAL"]


class TextOptions(ctypes.Structure):
    """vr_text_options_t"""
    _fields_ = [
        ("add_special_tokens", ctypes.c_int),
        ("add_generation_prompt", ctypes.c_int),
        ("chat_template_kwargs", ctypes.c_char_p),
        ("chat_template", ctypes.c_char_p),
    ]


class TextBatch(ctypes.Structure):
    """vr_text_batch_t"""
    _fields_ = [
        ("n", ctypes.c_uint32),
        ("items", ctypes.POINTER(ctypes.c_char_p)),
        ("lens", ctypes.POINTER(ctypes.c_size_t)),
        ("extras", ctypes.POINTER(ctypes.c_char_p)),
        ("extras_len", ctypes.POINTER(ctypes.c_uint32)),
    ]


STRUCTS = {"vr_text_options_t": TextOptions, "vr_text_batch_t": TextBatch}


class TextLibraryNotFound(_lib.LibraryNotFound):
    """libverl_reward_text.so could not be loaded; .tried lists (place, reason)."""

    def __init__(self, tried):
        OSError.__init__(self, "\n".join(
            ["cannot load %s; looked in:" % LIB_BASENAME] + ["  %s: %s" % t for t in tried] +
            ["HINT: build it (cmake --build build --target verl_reward_text) and set "
             "VERL_REWARD_TEXT_LIB=/path/to/build/lib/%s, or install the package from a build that has it"
             % LIB_BASENAME]))
        self.tried = tried


def candidate_paths(client_lib_path=None):
    """[(description, path-or-name)] in lookup order (see the module docstring)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("VERL_REWARD_TEXT_LIB")
    if env:
        out.append(("VERL_REWARD_TEXT_LIB", os.path.join(env, LIB_BASENAME) if os.path.isdir(env) else env))
    if client_lib_path and os.sep in client_lib_path:
        out.append(("beside the client library", os.path.join(os.path.dirname(client_lib_path), LIB_BASENAME)))
    out.append(("next to the package", os.path.join(here, LIB_BASENAME)))
    out.append(("source checkout build", os.path.join(here, "..", "..", "build", "lib", LIB_BASENAME)))
    out.append(("system path", ctypes.util.find_library("verl_reward_text") or LIB_BASENAME))
    return out


_tlib = None
_tlib_lock = threading.Lock()


def _declare(lib):
    c = ctypes
    p = c.c_void_p
    sigs = {
        "vr_text_options_init": (None, [c.POINTER(TextOptions)]),
        "vr_client_text_load": (c.c_int, [c.c_char_p, c.POINTER(p)]),
        "vr_client_text_free": (None, [p]),
        "vr_client_text_vocab_size": (c.c_uint32, [p]),
        "vr_client_text_has_chat_template": (c.c_int, [p]),
        "vr_client_text_check": (c.c_int, [p, p]),
        "vr_client_text_encode": (c.c_int, [p, c.c_int, c.POINTER(TextBatch), c.POINTER(TextOptions),
                                            c.POINTER(c.POINTER(c.c_int32)), c.POINTER(c.POINTER(c.c_uint32)),
                                            c.POINTER(c.c_uint64)]),
        "vr_client_text_render": (c.c_int, [p, c.c_char_p, c.c_size_t, c.POINTER(TextOptions),
                                            c.POINTER(c.c_void_p), c.POINTER(c.c_size_t)]),
        "vr_client_text_bos_token": (c.c_char_p, [p]),
        "vr_client_text_buffer_free": (None, [c.c_void_p]),
        "vr_client_text_last_error": (c.c_char_p, []),
        "vr_client_text_last_bad_item": (c.c_int32, []),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


def load_text_library():
    """The loaded, declared libverl_reward_text (once per process; thread-safe)."""
    global _tlib
    client = _lib.load_library()          # first: the text library's NEEDED client is this one
    with _tlib_lock:
        if _tlib is not None:
            return _tlib
        tried = []
        for place, path in candidate_paths(getattr(client, "vr_loaded_from", None)):
            explicit = place == "VERL_REWARD_TEXT_LIB"
            if os.sep in path and not os.path.exists(path):
                tried.append((place, "%s (no such file)" % path))
                if explicit:
                    raise TextLibraryNotFound(tried)
                continue
            try:
                lib = _declare(ctypes.CDLL(path))
            except (OSError, AttributeError) as e:
                tried.append((place, "%s (%s)" % (path, e)))
                if explicit:
                    raise TextLibraryNotFound(tried) from None
                continue
            lib.vr_loaded_from = path
            _tlib = lib
            return lib
        raise TextLibraryNotFound(tried)


def _error(lib, rc, encoding=False):
    """The library's error (the failing item as bad_seq after an encode)."""
    detail = lib.vr_client_text_last_error()
    bad = int(lib.vr_client_text_last_bad_item()) if encoding else -1
    return error_for(rc, detail.decode("utf-8", "replace") if detail else None, bad)


def _utf8(x, what, i):
    """str -> UTF-8 bytes; bytes pass as they are (the library checks them)."""
    if isinstance(x, bytes):
        return x
    if isinstance(x, str):
        try:
            return x.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidRequest(_INVAL, "%s[%d] is not encodable as UTF-8 (%s)" % (what, i, e), i) from None
    raise InvalidRequest(_INVAL, "%s[%d] must be a str or bytes, not %s" % (what, i, type(x).__name__), i)


def _conversation(conv, i):
    """A conversation -> its JSON text (a str / bytes conversation is taken as JSON text)."""
    if isinstance(conv, (str, bytes)):
        return _utf8(conv, "messages", i)
    try:
        return json.dumps(list(conv), ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as e:
        raise InvalidRequest(_INVAL, "messages[%d] is not JSON-serialisable: %s" % (i, e), i) from None


class RmTokenizer:
    """One tokenizer directory loaded by libverl_reward_text (immutable; thread-safe).

    Raises NotFound-like VerlRewardError (VR_ERR_NOT_FOUND) when the directory has no
    tokenizer.json, VR_ERR_MODEL_FORMAT / VR_ERR_UNSUPPORTED for a file the library cannot
    read; the message names the file and the reason."""

    def __init__(self, directory):
        self._lib = load_text_library()
        self.directory = os.fspath(directory)
        h = ctypes.c_void_p()
        rc = self._lib.vr_client_text_load(self.directory.encode("utf-8"), ctypes.byref(h))
        if rc != 0:
            raise _error(self._lib, rc)
        self._h = h
        bos = self._lib.vr_client_text_bos_token(h)
        self.bos_token = bos.decode("utf-8") if bos is not None else None

    @property
    def vocab_size(self):
        """len(tokenizer) in transformers."""
        return int(self._lib.vr_client_text_vocab_size(self._h))

    def __len__(self):
        return self.vocab_size

    @property
    def has_chat_template(self):
        return bool(self._lib.vr_client_text_has_chat_template(self._h))

    def _options(self, add_special_tokens=True, add_generation_prompt=False, chat_template_kwargs=None,
                 chat_template=None):
        o = TextOptions()
        self._lib.vr_text_options_init(ctypes.byref(o))
        o.add_special_tokens = 1 if add_special_tokens else 0
        o.add_generation_prompt = 1 if add_generation_prompt else 0
        if chat_template_kwargs:
            o.chat_template_kwargs = json.dumps(dict(chat_template_kwargs)).encode("utf-8")
        if chat_template:
            o.chat_template = chat_template.encode("utf-8")
        return o

    def _encode(self, kind, blobs, opts):
        c = ctypes
        n = len(blobs)
        items = (c.c_char_p * max(n, 1))(*blobs)
        lens = (c.c_size_t * max(n, 1))(*[len(b) for b in blobs])
        b = TextBatch(n=n, items=items, lens=lens)
        ids_p, cu_p, nt = c.POINTER(c.c_int32)(), c.POINTER(c.c_uint32)(), c.c_uint64()
        rc = self._lib.vr_client_text_encode(self._h, kind, c.byref(b), c.byref(opts), c.byref(ids_p),
                                             c.byref(cu_p), c.byref(nt))
        if rc != 0:
            raise _error(self._lib, rc, encoding=True)
        try:
            ids = array("i", c.string_at(ids_p, nt.value * 4)) if nt.value else array("i")
            cu = array("I", c.string_at(cu_p, (n + 1) * 4))
        finally:
            self._lib.vr_client_text_buffer_free(c.cast(ids_p, c.c_void_p))
            self._lib.vr_client_text_buffer_free(c.cast(cu_p, c.c_void_p))
        return ids, cu

    def encode_texts(self, texts, add_special_tokens=True):
        """texts (str or bytes each) -> (ids array('i'), cu array('I')), packed."""
        return self._encode(PLAIN, [_utf8(t, "text", i) for i, t in enumerate(texts)],
                            self._options(add_special_tokens))

    def encode_conversations(self, conversations, add_generation_prompt=False, chat_template_kwargs=None,
                             chat_template=None):
        """conversations (lists of {"role", "content"}, or their JSON text) -> (ids, cu), each as
        apply_chat_template(conv, add_generation_prompt=..., tokenize=True)."""
        return self._encode(CHAT, [_conversation(cv, i) for i, cv in enumerate(conversations)],
                            self._options(True, add_generation_prompt, chat_template_kwargs, chat_template))

    # -- the transformers tokenizer surface the adapters use ---------------------------------
    def encode(self, text, add_special_tokens=True):
        """tokenizer(text, add_special_tokens=...)["input_ids"] -> list[int]."""
        ids, _ = self.encode_texts([text], add_special_tokens)
        return ids.tolist()

    def apply_chat_template(self, conversation, add_generation_prompt=False, tokenize=True, chat_template=None,
                            **kwargs):
        """As transformers': tokenize=True -> list[int]; tokenize=False -> the rendered str.
        Further keyword arguments are template variables (enable_thinking=...)."""
        if tokenize:
            ids, _ = self.encode_conversations([conversation], add_generation_prompt, kwargs, chat_template)
            return ids.tolist()
        c = ctypes
        blob = _conversation(conversation, 0)
        out, n = c.c_void_p(), c.c_size_t()
        opts = self._options(True, add_generation_prompt, kwargs, chat_template)
        rc = self._lib.vr_client_text_render(self._h, blob, len(blob), c.byref(opts), c.byref(out), c.byref(n))
        if rc != 0:
            raise _error(self._lib, rc)
        try:
            return c.string_at(out, n.value).decode("utf-8")
        finally:
            self._lib.vr_client_text_buffer_free(out)

    # -- against a server ----------------------------------------------------------------------
    def check(self, client):
        """vr_client_text_check against a RewardClient's server: InvalidRequest when the tokenizer
        has ids the served model lacks (a server without a model is not checked)."""
        rc = client._call(lambda handle: self._lib.vr_client_text_check(self._h, handle))
        if rc != 0:
            raise _error(self._lib, rc)

    def close(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.vr_client_text_free(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "RmTokenizer(%r, vocab_size=%d)" % (self.directory, self.vocab_size)


_loaded = {}
_loaded_lock = threading.Lock()


def load(directory):
    """The process's RmTokenizer for this directory (loaded once; a str path or an RmTokenizer)."""
    if isinstance(directory, RmTokenizer):
        return directory
    key = os.path.abspath(os.fspath(directory))
    with _loaded_lock:
        tok = _loaded.get(key)
        if tok is None:
            tok = _loaded[key] = RmTokenizer(directory)
        return tok
