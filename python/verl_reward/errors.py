"""Exceptions of the verl_reward binding, mapped from include/verl_reward/status.h.

Every failure the C library or the HTTP server reports carries a negative
vr_status_t code. `error_for(code, message)` turns it into the matching
exception class; each exception keeps `.code` (the int), `.name`
("VR_ERR_TIMEOUT") and `.message` (the detail text).

STATUS_TABLE mirrors the X-macro table of status.h entry for entry (value,
name, message); tests/python/test_status_table.py parses the header and fails
when a code is added there but not here.
"""

# (value, name, message): same order and text as VR_STATUS_TABLE in status.h.
STATUS_TABLE = (
    (0, "VR_OK", "success"),
    (-1, "VR_ERR_INVAL", "invalid argument"),
    (-2, "VR_ERR_NOMEM", "out of memory"),
    (-3, "VR_ERR_IO", "I/O error"),
    (-4, "VR_ERR_TIMEOUT", "timed out"),
    (-5, "VR_ERR_SERVER_GONE", "reward server is gone (died or stopped)"),
    (-6, "VR_ERR_SERVER_RESTARTED", "reward server restarted (epoch changed); reconnect"),
    (-7, "VR_ERR_SHUTTING_DOWN", "reward server is shutting down"),
    (-8, "VR_ERR_TOO_LARGE", "request too large for the server's limits"),
    (-9, "VR_ERR_SEQ_TOO_LONG", "sequence longer than the maximum length"),
    (-10, "VR_ERR_EMPTY_SEQ", "empty sequence"),
    (-11, "VR_ERR_TOKEN_RANGE", "token id outside the model's vocabulary"),
    (-12, "VR_ERR_NO_LANE", "no free client lane in the segment"),
    (-13, "VR_ERR_OVERLOADED", "server overloaded; retry later"),
    (-14, "VR_ERR_EXISTS", "already exists (a live server owns this name)"),
    (-15, "VR_ERR_NOSPACE", "not enough space (e.g. /dev/shm too small)"),
    (-16, "VR_ERR_BAD_SEGMENT", "shared-memory segment is malformed or of another version"),
    (-17, "VR_ERR_PERM", "permission denied"),
    (-18, "VR_ERR_NOT_FOUND", "not found"),
    (-19, "VR_ERR_MODEL_FORMAT", "malformed model file"),
    (-20, "VR_ERR_UNSUPPORTED", "unsupported (architecture, dtype or option)"),
    (-21, "VR_ERR_DEVICE", "device (GPU) error"),
    (-22, "VR_ERR_MALFORMED", "malformed request"),
    (-23, "VR_ERR_AGAIN", "not ready yet; try again"),
    (-24, "VR_ERR_CANCELLED", "cancelled"),
    (-25, "VR_ERR_INTERNAL", "internal error"),
    (-26, "VR_ERR_NO_DEVICE", "no usable GPU device"),
    (-27, "VR_ERR_PARSE", "could not parse input"),
    (-28, "VR_ERR_BUSY", "resource busy (too many requests in flight)"),
    (-29, "VR_ERR_NONFINITE", "score is not finite (NaN/Inf)"),
)

STATUS_NAMES = {value: name for value, name, _ in STATUS_TABLE}
STATUS_MESSAGES = {value: msg for value, _, msg in STATUS_TABLE}
STATUS_VALUES = {name: value for value, name, _ in STATUS_TABLE}


class VerlRewardError(Exception):
    """Base of every error raised by verl_reward.

    code: the negative vr_status_t value; name: its enum name; message: the
    detail (the C library's vr_client_last_error() or the server's text)."""

    def __init__(self, code, message=None):
        self.code = int(code)
        self.name = STATUS_NAMES.get(self.code, "VR_STATUS_%d" % self.code)
        self.message = message or STATUS_MESSAGES.get(self.code, "unknown status")
        super().__init__("%s (%d): %s" % (self.name, self.code, self.message))


class InvalidRequest(VerlRewardError, ValueError):
    """The request itself is wrong (bad argument, empty sequence, token id out of range,
    malformed extras). `bad_seq` is the index of the first bad sequence or -1."""

    def __init__(self, code, message=None, bad_seq=-1):
        super().__init__(code, message)
        self.bad_seq = bad_seq


class SequenceFormError(InvalidRequest, TypeError):
    """The sequences are in none of the accepted forms (a list of ints, a list of
    token-id lists, a 1-D/2-D numpy array or torch tensor). Both a TypeError and an
    InvalidRequest, so either except clause catches it."""


class RequestTooLarge(VerlRewardError):
    """The request exceeds the server's published limits (tokens, sequences, arena)."""


class SequenceTooLong(RequestTooLarge):
    """One sequence is longer than the server's maximum length."""


class Timeout(VerlRewardError, TimeoutError):
    """No answer within the wait bound. For a submitted request the request stays
    pending: PendingScore.result() may be called again."""


class ServerGone(VerlRewardError, ConnectionError):
    """The server died, stopped or is shutting down: reconnect (a new RewardClient)
    once it is back."""


class ServerRestarted(ServerGone):
    """The server restarted under the same name (epoch changed): reconnect."""


class ShuttingDown(ServerGone):
    """The server is stopping and takes no new work."""


class Overloaded(VerlRewardError):
    """The server or this client's lane is full right now: retry later."""


class Busy(Overloaded):
    """This client's lane has too many requests in flight: wait for earlier ones."""


class NoLane(Overloaded):
    """Every client lane of the segment is leased."""


class ConnectFailed(VerlRewardError):
    """Attaching to the segment failed: not found, permission, another version."""


class ServerError(VerlRewardError):
    """A failure inside the server (model, device, memory, internal)."""


_CLASS_BY_NAME = {
    "VR_ERR_INVAL": InvalidRequest,
    "VR_ERR_NOMEM": ServerError,
    "VR_ERR_IO": ServerError,
    "VR_ERR_TIMEOUT": Timeout,
    "VR_ERR_SERVER_GONE": ServerGone,
    "VR_ERR_SERVER_RESTARTED": ServerRestarted,
    "VR_ERR_SHUTTING_DOWN": ShuttingDown,
    "VR_ERR_TOO_LARGE": RequestTooLarge,
    "VR_ERR_SEQ_TOO_LONG": SequenceTooLong,
    "VR_ERR_EMPTY_SEQ": InvalidRequest,
    "VR_ERR_TOKEN_RANGE": InvalidRequest,
    "VR_ERR_NO_LANE": NoLane,
    "VR_ERR_OVERLOADED": Overloaded,
    "VR_ERR_EXISTS": ConnectFailed,
    "VR_ERR_NOSPACE": ServerError,
    "VR_ERR_BAD_SEGMENT": ConnectFailed,
    "VR_ERR_PERM": ConnectFailed,
    "VR_ERR_NOT_FOUND": ConnectFailed,
    "VR_ERR_MODEL_FORMAT": ServerError,
    "VR_ERR_UNSUPPORTED": InvalidRequest,
    "VR_ERR_DEVICE": ServerError,
    "VR_ERR_MALFORMED": InvalidRequest,
    "VR_ERR_AGAIN": Overloaded,
    "VR_ERR_CANCELLED": VerlRewardError,
    "VR_ERR_INTERNAL": ServerError,
    "VR_ERR_NO_DEVICE": ServerError,
    "VR_ERR_PARSE": InvalidRequest,
    "VR_ERR_BUSY": Busy,
    "VR_ERR_NONFINITE": ServerError,
}

# code -> exception class; every non-zero code of STATUS_TABLE has an entry.
ERROR_CLASSES = {STATUS_VALUES[name]: cls for name, cls in _CLASS_BY_NAME.items()}


def error_for(code, message=None, bad_seq=-1):
    """The exception instance for a negative status code (unknown codes give the
    base class, so a newer server never makes the binding crash)."""
    cls = ERROR_CLASSES.get(int(code), VerlRewardError)
    if issubclass(cls, InvalidRequest):
        return cls(code, message, bad_seq)
    return cls(code, message)
