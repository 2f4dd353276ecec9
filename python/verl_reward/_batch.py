"""Turning user input into the packed form both transports send.

Sequences, the forms every entry point accepts:
  - one sequence: a flat list/tuple of ints, or a 1-D numpy array / torch tensor
    (the answer is then a list of one score);
  - a batch: a list (or tuple) whose items are lists of ints, 1-D numpy arrays
    or 1-D torch tensors; or one 2-D numpy array / torch tensor (each row is one
    sequence, taken whole);
  - a padded batch as verl holds it: a mapping (dict, TensorDict) with "input_ids"
    (B, T) and "attention_mask" (B, T); sequence i is input_ids[i] where the mask is
    non-zero, in order (left or right padding alike);
  - PackedSequences (pack_padded's result), passed through.
Anything else is a TypeError naming these forms. With numpy importable, arrays and
tensors (through .numpy()) are packed without a Python loop over tokens: one
vectorised conversion (and mask selection) per batch or per row. Extras: None, or one
entry per sequence, each None, a dict (packed to msgpack) or bytes (sent as is).
"""

import numbers
from array import array

try:
    import numpy as _np
except ImportError:          # optional: lists and the torch-only path still work
    _np = None

from . import msgpack
from .errors import InvalidRequest, SequenceFormError, STATUS_VALUES

_INVAL = STATUS_VALUES["VR_ERR_INVAL"]
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1


FORMS = ("a list of ints (one sequence), a list of token-id lists (a batch), "
         "a 1-D/2-D numpy array or torch tensor, or {\"input_ids\", \"attention_mask\"} (a padded batch)")

assert array("i").itemsize == 4 and array("I").itemsize == 4, "array('i') must be int32 here"


class PackedSequences:
    """Token ids already packed: ids (array('i')) and cu (array('I'), n + 1 offsets);
    sequence i is ids[cu[i]:cu[i+1]]. The entry points take it as it is."""

    __slots__ = ("ids", "cu")

    def __init__(self, ids, cu):
        self.ids, self.cu = ids, cu

    def __len__(self):
        return len(self.cu) - 1

    def __getitem__(self, i):
        return self.ids[self.cu[i]:self.cu[i + 1]].tolist()


def _as_numpy(x):
    """x as a numpy array when it is one or a torch tensor (via .numpy()) and numpy is
    importable; else None."""
    if _np is None:
        return None
    if isinstance(x, _np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "numpy"):      # torch tensor (any device)
        return x.detach().cpu().numpy()
    return None


def _np_ids(flat, cu_np, base=0):
    """1-D integer array -> array('i'), checked for int32 in one pass. cu_np (n + 1 offsets)
    names the sequence of a bad id; None: flat is sequence `base`."""
    def seq_of(pos):
        return base if cu_np is None else int(_np.searchsorted(cu_np, pos, side="right")) - 1
    if flat.dtype.kind not in "iu":
        raise InvalidRequest(_INVAL, "sequence %d: token ids must be integers (dtype %s)" % (base, flat.dtype), base)
    if flat.size and (flat.dtype.itemsize > 4 or flat.dtype.kind == "u"):
        bad = (flat > _INT32_MAX) if flat.dtype.kind == "u" else (flat < _INT32_MIN) | (flat > _INT32_MAX)
        if bad.any():
            i = seq_of(int(bad.argmax()))
            raise InvalidRequest(_INVAL, "sequence %d has a token id outside int32" % i, i)
    ids = array("i")
    ids.frombytes(_np.ascontiguousarray(flat, dtype=_np.int32).tobytes())
    return ids


def _is_padded(x):
    return not isinstance(x, (list, tuple, str, bytes)) and not hasattr(x, "ndim") and hasattr(x, "keys") \
        and "input_ids" in x.keys()


def pack_padded(input_ids, attention_mask=None):
    """verl's padded batch -> PackedSequences of the tokens where attention_mask != 0
    (per row, in order; any padding side). input_ids, attention_mask: (B, T) numpy arrays,
    torch tensors or nested lists; no mask: every row whole."""
    a = _as_numpy(input_ids)
    m = None if attention_mask is None else _as_numpy(attention_mask)
    if a is not None and (attention_mask is None or m is not None):
        if a.ndim != 2 or (m is not None and m.shape != a.shape):
            raise _form_error("a padded batch needs input_ids and attention_mask of one (B, T) shape; got %s and %s"
                              % (tuple(a.shape), None if m is None else tuple(m.shape)))
        if m is None:
            lens = _np.full(a.shape[0], a.shape[1], dtype=_np.int64)
            flat = a.reshape(-1)
        else:
            keep = m != 0
            flat, lens = a[keep], keep.sum(axis=1)
        cu_np = _np.zeros(a.shape[0] + 1, dtype=_np.int64)
        _np.cumsum(lens, out=cu_np[1:])
        cu = array("I")
        cu.frombytes(cu_np.astype(_np.uint32).tobytes())
        return PackedSequences(_np_ids(flat, cu_np), cu)
    if hasattr(input_ids, "detach") and attention_mask is not None and hasattr(attention_mask, "bool"):
        keep = attention_mask.bool()               # torch without numpy: one masked select
        flat, lens = input_ids[keep].tolist(), keep.sum(dim=-1).tolist()
        ids, cu = array("i"), array("I", [0])
        ids.extend(flat)
        for n in lens:
            cu.append(cu[-1] + int(n))
        return PackedSequences(ids, cu)
    rows = _rows(input_ids)                        # nested lists: the plain path
    if attention_mask is None:
        return PackedSequences(*pack_sequences(rows))
    masks = list(attention_mask)
    if len(masks) != len(rows):
        raise _form_error("input_ids has %d rows but attention_mask %d" % (len(rows), len(masks)))
    return PackedSequences(*pack_sequences([[t for t, k in zip(r, mr) if k] for r, mr in zip(rows, masks)]))


def masked_ids(ids, mask):
    """One 1-D sequence restricted to mask != 0 -> list of int (vectorised for arrays/tensors)."""
    a, m = _as_numpy(ids), _as_numpy(mask)
    if a is not None and m is not None:
        return a[m != 0].tolist()
    if hasattr(ids, "detach") and hasattr(mask, "bool"):
        return ids[mask.bool()].tolist()
    return [t for t, k in zip(ids, mask) if k]


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
    if isinstance(seqs, PackedSequences):
        return seqs.ids, seqs.cu
    if _is_padded(seqs):
        p = pack_padded(seqs["input_ids"], seqs["attention_mask"] if "attention_mask" in seqs.keys() else None)
        return p.ids, p.cu
    whole = None if isinstance(seqs, (list, tuple)) else _as_numpy(seqs)
    if whole is not None:                       # one array / tensor: no loop at all
        if whole.ndim not in (1, 2):
            raise _form_error("sequences must be %s; got a %d-D array" % (FORMS, whole.ndim))
        p = pack_padded(whole.reshape(1, -1) if whole.ndim == 1 else whole)
        return p.ids, p.cu
    rows = _rows(seqs)
    ids = array("i")
    cu = array("I", [0])
    for i, seq in enumerate(rows):
        a = _as_numpy(seq)
        if a is not None:                       # a row array / tensor: one conversion
            if a.ndim != 1:
                raise InvalidRequest(_INVAL, "sequence %d is not 1-D" % i, i)
            ids.extend(_np_ids(a, None, i))
            cu.append(len(ids))
            continue
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
