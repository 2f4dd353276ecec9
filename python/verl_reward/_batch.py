"""Turning user input into the packed form both transports send.

Sequences, the forms every entry point accepts:
  - one sequence: a flat list/tuple of ints, or a 1-D numpy array / torch tensor
    (the answer is then a list of one score);
  - a batch: a list (or tuple) whose items are lists of ints, 1-D numpy arrays
    or 1-D torch tensors; or one 2-D numpy array / torch tensor (each row is one
    sequence, taken whole: strip padding first).
Anything else is a TypeError naming these forms. Extras: None, or one entry per
sequence, each None, a dict (packed to msgpack) or bytes (sent as is).
"""

import numbers
from array import array

from . import msgpack
from .errors import InvalidRequest, SequenceFormError, STATUS_VALUES

_INVAL = STATUS_VALUES["VR_ERR_INVAL"]
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1


FORMS = ("a list of ints (one sequence), a list of token-id lists (a batch), "
         "or a 1-D/2-D numpy array or torch tensor")


def _form_error(msg):
    return SequenceFormError(_INVAL, msg)


def _is_int(x):
    """True for Python ints and numpy/torch integer scalars (not bool, not floats)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, numbers.Integral):
        return True
    dt = getattr(x, "dtype", None)
    return getattr(x, "ndim", None) == 0 and dt is not None and (
        getattr(dt, "kind", "") in "iu" or str(dt).startswith(("torch.int", "torch.uint")))


def _rows(seqs):
    """seqs -> list of per-sequence objects (a flat sequence is a batch of one;
    2-D arrays/tensors are split into rows)."""
    ndim = getattr(seqs, "ndim", None)
    if ndim is not None and not isinstance(seqs, (list, tuple)):
        if ndim == 1:
            return [seqs]
        if ndim != 2:
            raise _form_error("sequences must be %s; got a %d-D array" % (FORMS, ndim))
        return list(seqs)
    if not isinstance(seqs, (list, tuple)):
        raise _form_error("sequences must be %s; got %s" % (FORMS, type(seqs).__name__))
    if seqs and _is_int(seqs[0]):
        for j, x in enumerate(seqs):
            if not _is_int(x):
                raise _form_error("sequences must be %s; got a list starting with an int whose item %d is %s"
                                % (FORMS, j, type(x).__name__))
        return [seqs]
    for i, s in enumerate(seqs):
        if isinstance(s, (str, bytes)) or not (isinstance(s, (list, tuple)) or hasattr(s, "ndim")):
            raise _form_error("sequences must be %s; got a list whose item %d is %s"
                            % (FORMS, i, type(s).__name__))
    return list(seqs)


def _as_int_list(seq, i):
    """One sequence -> something array('i') can extend from."""
    if hasattr(seq, "detach"):            # torch tensor
        seq = seq.detach().cpu()
    if getattr(seq, "ndim", 1) != 1:
        raise InvalidRequest(_INVAL, "sequence %d is not 1-D" % i, i)
    if hasattr(seq, "tolist"):            # numpy array / torch tensor
        seq = seq.tolist()
    if isinstance(seq, (str, bytes)):
        raise InvalidRequest(_INVAL, "sequence %d is a %s, not token ids" % (i, type(seq).__name__), i)
    return seq


def pack_sequences(seqs):
    """-> (ids: array('i'), cu_seqlens: array('I')); sequence i is ids[cu[i]:cu[i+1]].

    Raises InvalidRequest for non-integer ids or ids outside int32 (the server
    checks the vocabulary range; empty sequences are the server's to reject)."""
    rows = _rows(seqs)
    ids = array("i")
    cu = array("I", [0])
    for i, seq in enumerate(rows):
        seq = _as_int_list(seq, i)
        try:
            part = array("i", seq)
        except OverflowError:
            raise InvalidRequest(_INVAL, "sequence %d has a token id outside int32" % i, i) from None
        except TypeError as e:
            raise InvalidRequest(_INVAL, "sequence %d: token ids must be integers (%s)" % (i, e), i) from None
        ids.extend(part)
        if len(ids) > 0xFFFFFFFF:
            raise InvalidRequest(_INVAL, "more than 2**32-1 tokens in one request")
        cu.append(len(ids))
    return ids, cu


def extras_list(extras, n_seqs, allowed, what):
    """extras -> list of n_seqs entries (None stays None); each entry must be None or
    an instance of `allowed` (what: their description for the error)."""
    if extras is None:
        return None
    extras = list(extras)
    if len(extras) != n_seqs:
        raise InvalidRequest(_INVAL, "extras has %d entries for %d sequences" % (len(extras), n_seqs))
    for i, e in enumerate(extras):
        if e is not None and not isinstance(e, allowed):
            raise InvalidRequest(_INVAL, "extras[%d] must be %s or None, not %s"
                                 % (i, what, type(e).__name__), i)
    return extras


def pack_extras(extras, n_seqs):
    """extras -> list of bytes-or-None of length n_seqs (None when extras is None)."""
    extras = extras_list(extras, n_seqs, (dict, bytes, bytearray, memoryview), "a dict or bytes")
    if extras is None:
        return None
    out = []
    for i, e in enumerate(extras):
        if e is None:
            out.append(None)
        elif isinstance(e, (bytes, bytearray, memoryview)):
            out.append(bytes(e))
        else:
            try:
                out.append(msgpack.packb(e))
            except (TypeError, ValueError, OverflowError) as err:
                raise InvalidRequest(_INVAL, "extras[%d]: %s" % (i, err), i) from None
    return out
