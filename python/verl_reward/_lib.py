"""ctypes view of libverl_reward_client (include/verl_reward/client.h).

The structures below must match client.h field for field;
tests/python/test_layout.py compares their sizes and offsets with what the C
compiler gives (a small C program built beside the tests).

Library lookup, first hit wins (load_library() lists every place it tried
when none works):
  1. $VERL_REWARD_LIB: a path to the .so, or a directory holding it (an
     explicit setting always wins; if it names nothing, that is an error);
  2. next to this package (pip install copies it there when the build had it;
     the build tree's build/python/verl_reward/ has it too);
  3. the build tree of a source checkout (<repo>/build/lib/);
  4. the system search path (LD_LIBRARY_PATH, ld.so.cache) via dlopen.
"""

import ctypes
import ctypes.util
import os
import threading

LIB_BASENAME = "libverl_reward_client.so"
VR_MAX_COMPONENTS = 8
VR_COMPONENT_NAME_MAX = 24


class ClientOptions(ctypes.Structure):
    """vr_client_options_t"""
    _fields_ = [
        ("timeout_us", ctypes.c_int64),
        ("connect_timeout_us", ctypes.c_int64),
        ("spin_us", ctypes.c_uint32),
        ("expected_server_uid", ctypes.c_int64),
        ("socket_dir", ctypes.c_char_p),
    ]


class Batch(ctypes.Structure):
    """vr_batch_t"""
    _fields_ = [
        ("n_seqs", ctypes.c_uint32),
        ("token_ids", ctypes.POINTER(ctypes.c_int32)),
        ("cu_seqlens", ctypes.POINTER(ctypes.c_uint32)),
        ("extras", ctypes.POINTER(ctypes.c_char_p)),   # const uint8_t *const *
        ("extras_len", ctypes.POINTER(ctypes.c_uint32)),
    ]


class RequestInfo(ctypes.Structure):
    """vr_request_info_t"""
    _fields_ = [
        ("status", ctypes.c_int32),
        ("n_seqs", ctypes.c_uint32),
        ("queue_us", ctypes.c_uint32),
        ("compute_us", ctypes.c_uint32),
        ("bad_seq", ctypes.c_int32),
        ("n_components", ctypes.c_uint32),
        ("component_names", (ctypes.c_char * VR_COMPONENT_NAME_MAX) * VR_MAX_COMPONENTS),
    ]


class Limits(ctypes.Structure):
    """vr_limits_t"""
    _fields_ = [
        ("max_seq_len", ctypes.c_uint32),
        ("max_seqs_per_request", ctypes.c_uint32),
        ("arena_bytes", ctypes.c_uint64),
        ("max_inflight", ctypes.c_uint32),
        ("vocab_size", ctypes.c_uint32),
        ("n_lanes", ctypes.c_uint32),
    ]


STRUCTS = {
    "vr_client_options_t": ClientOptions,
    "vr_batch_t": Batch,
    "vr_request_info_t": RequestInfo,
    "vr_limits_t": Limits,
}


class LibraryNotFound(OSError):
    """libverl_reward_client.so could not be loaded; .tried lists (place, reason)."""

    def __init__(self, tried):
        self.tried = tried
        lines = ["cannot load %s; looked in:" % LIB_BASENAME]
        lines += ["  %s: %s" % (place, why) for place, why in tried]
        lines.append("HINT: build it (cmake --build build --target verl_reward_client) and set "
                     "VERL_REWARD_LIB=/path/to/build/lib/%s, or install the package from a build "
                     "that has it" % LIB_BASENAME)
        super().__init__("\n".join(lines))


def candidate_paths():
    """[(description, path-or-name)] in lookup order (see the module docstring)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("VERL_REWARD_LIB")
    if env:
        p = os.path.join(env, LIB_BASENAME) if os.path.isdir(env) else env
        out.append(("VERL_REWARD_LIB", p))
    out.append(("next to the package", os.path.join(here, LIB_BASENAME)))
    out.append(("source checkout build", os.path.join(here, "..", "..", "build", "lib", LIB_BASENAME)))
    found = ctypes.util.find_library("verl_reward_client")
    out.append(("system path", found or LIB_BASENAME))
    return out


_lib = None
_lib_lock = threading.Lock()


def _declare(lib):
    c = ctypes
    p_client = c.c_void_p
    lib.vr_client_options_init.argtypes = [c.POINTER(ClientOptions)]
    lib.vr_client_options_init.restype = None
    lib.vr_client_connect.argtypes = [c.c_char_p, c.POINTER(ClientOptions), c.POINTER(p_client)]
    lib.vr_client_connect.restype = c.c_int
    lib.vr_client_close.argtypes = [p_client]
    lib.vr_client_close.restype = None
    lib.vr_client_limits.argtypes = [p_client, c.POINTER(Limits)]
    lib.vr_client_limits.restype = c.c_int
    lib.vr_client_score.argtypes = [p_client, c.POINTER(Batch), c.POINTER(c.c_float),
                                    c.POINTER(c.c_float), c.POINTER(RequestInfo)]
    lib.vr_client_score.restype = c.c_int
    lib.vr_client_submit.argtypes = [p_client, c.POINTER(Batch), c.POINTER(c.c_uint64)]
    lib.vr_client_submit.restype = c.c_int
    lib.vr_client_poll.argtypes = [p_client, c.c_uint64]
    lib.vr_client_poll.restype = c.c_int
    lib.vr_client_wait.argtypes = [p_client, c.c_uint64, c.c_int64, c.POINTER(c.c_float),
                                   c.POINTER(c.c_float), c.POINTER(RequestInfo)]
    lib.vr_client_wait.restype = c.c_int
    lib.vr_client_last_error.argtypes = []
    lib.vr_client_last_error.restype = c.c_char_p
    for name in ("vr_strerror", "vr_status_name"):   # optional: from vr_common, if exported
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes = [c.c_int]
            fn.restype = c.c_char_p
    return lib


def load_library():
    """The loaded, declared library (loaded once per process; thread-safe)."""
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried = []
        for place, path in candidate_paths():
            is_path = os.sep in path
            if is_path and not os.path.exists(path):
                tried.append((place, "%s (no such file)" % path))
                if place == "VERL_REWARD_LIB":
                    raise LibraryNotFound(tried)
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append((place, "%s (%s)" % (path, e)))
                if place == "VERL_REWARD_LIB":
                    raise LibraryNotFound(tried) from None
                continue
            try:
                _lib = _declare(lib)
            except AttributeError as e:
                tried.append((place, "%s (not the client library: %s)" % (path, e)))
                continue
            _lib.vr_loaded_from = path
            return _lib
        raise LibraryNotFound(tried)
