"""msgpack for the client: the `msgpack` package when it is installed (Debian python3-msgpack;
ray and verl depend on it), else a small pure-Python codec with the same output.

Used to pack per-sequence extras (data_source, solution_str, ground_truth, extra_info) for the
server's rule rewards, and HTTP bodies when the package is there. Supported types: dict (map),
str, int (-2**63 .. 2**64-1), float (always float64), bool, None, list/tuple (array),
bytes/bytearray/memoryview (bin). numpy / torch scalars and arrays are accepted through their
.item() / .tolist(). Anything else raises TypeError naming the path of the offending value.
Both codecs write the same bytes for these types (smallest integer / length forms, str8 for
32..255-byte strings, float64). Differences: nesting deeper than 64 is refused by the pure
codec only (the package allows about 500; the server applies its own limit); errors of the
package are re-raised by running the pure encoder for the path-naming message.

BACKEND is "msgpack" (the package) or "pure"; pure_packb / pure_unpackb are always the
fallback codec.
"""

import struct

try:
    import msgpack as _pkg   # absolute import: the PyPI / Debian package, not this module
    if not hasattr(_pkg, "packb") or not hasattr(_pkg, "ExtType"):
        _pkg = None
except ImportError:
    _pkg = None

__all__ = ["packb", "unpackb", "pure_packb", "pure_unpackb", "BACKEND"]

BACKEND = "msgpack" if _pkg is not None else "pure"


def _pack_len(out, n, fix_base, fix_max, code16, code32, code8=None, what="value"):
    if n <= fix_max:
        out.append(fix_base | n)
    elif code8 is not None and n <= 0xFF:
        out += struct.pack(">BB", code8, n)
    elif n <= 0xFFFF:
        out += struct.pack(">BH", code16, n)
    elif n <= 0xFFFFFFFF:
        out += struct.pack(">BI", code32, n)
    else:
        raise ValueError("msgpack: %s too long (%d)" % (what, n))


def _pack_int(out, v, path):
    if 0 <= v <= 0x7F:
        out.append(v)
    elif -32 <= v < 0:
        out += struct.pack(">b", v)
    elif 0 <= v <= 0xFF:
        out += struct.pack(">BB", 0xCC, v)
    elif 0 <= v <= 0xFFFF:
        out += struct.pack(">BH", 0xCD, v)
    elif 0 <= v <= 0xFFFFFFFF:
        out += struct.pack(">BI", 0xCE, v)
    elif 0 <= v <= 0xFFFFFFFFFFFFFFFF:
        out += struct.pack(">BQ", 0xCF, v)
    elif -0x80 <= v < 0:
        out += struct.pack(">Bb", 0xD0, v)
    elif -0x8000 <= v < 0:
        out += struct.pack(">Bh", 0xD1, v)
    elif -0x80000000 <= v < 0:
        out += struct.pack(">Bi", 0xD2, v)
    elif -0x8000000000000000 <= v < 0:
        out += struct.pack(">Bq", 0xD3, v)
    else:
        raise OverflowError("msgpack: integer %d at %s does not fit in 64 bits" % (v, path))


def _pack(out, v, path, depth):
    if depth > 64:
        raise ValueError("msgpack: nesting deeper than 64 at %s" % path)
    if v is None:
        out.append(0xC0)
    elif v is True:
        out.append(0xC3)
    elif v is False:
        out.append(0xC2)
    elif isinstance(v, int):
        _pack_int(out, int(v), path)
    elif isinstance(v, float):
        out += struct.pack(">Bd", 0xCB, v)
    elif isinstance(v, str):
        b = v.encode("utf-8")
        _pack_len(out, len(b), 0xA0, 31, 0xDA, 0xDB, code8=0xD9, what="string")
        out += b
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        n = len(b)
        if n <= 0xFF:
            out += struct.pack(">BB", 0xC4, n)
        elif n <= 0xFFFF:
            out += struct.pack(">BH", 0xC5, n)
        elif n <= 0xFFFFFFFF:
            out += struct.pack(">BI", 0xC6, n)
        else:
            raise ValueError("msgpack: bytes at %s too long (%d)" % (path, n))
        out += b
    elif isinstance(v, dict):
        _pack_len(out, len(v), 0x80, 15, 0xDE, 0xDF, what="map")
        for k, item in v.items():
            _pack(out, k, path + ".<key>", depth + 1)
            _pack(out, item, "%s.%s" % (path, k), depth + 1)
    elif isinstance(v, (list, tuple)):
        _pack_len(out, len(v), 0x90, 15, 0xDC, 0xDD, what="array")
        for i, item in enumerate(v):
            _pack(out, item, "%s[%d]" % (path, i), depth + 1)
    elif hasattr(v, "tolist") and getattr(v, "ndim", 0) > 0:
        _pack(out, v.tolist(), path, depth + 1)   # numpy array / torch tensor
    elif hasattr(v, "item"):
        _pack(out, v.item(), path, depth + 1)     # numpy / torch scalar
    else:
        raise TypeError("msgpack: cannot encode %s at %s" % (type(v).__name__, path))


def pure_packb(obj):
    """obj -> msgpack bytes (the pure-Python codec)."""
    out = bytearray()
    _pack(out, obj, "$", 0)
    return bytes(out)


class _Reader:
    def __init__(self, data):
        self.data = memoryview(bytes(data))
        self.pos = 0

    def take(self, n):
        if n > len(self.data) - self.pos:
            raise ValueError("msgpack: truncated input at offset %d (need %d bytes)" % (self.pos, n))
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]


_FIXED = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
          0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}


def _unpack(r, depth):
    if depth > 64:
        raise ValueError("msgpack: nesting deeper than 64")
    t = r.unpack(">B")
    if t <= 0x7F:
        return t
    if t >= 0xE0:
        return t - 0x100
    if 0x80 <= t <= 0x8F:
        return _unpack_map(r, t & 0x0F, depth)
    if 0x90 <= t <= 0x9F:
        return [_unpack(r, depth + 1) for _ in range(t & 0x0F)]
    if 0xA0 <= t <= 0xBF:
        return str(r.take(t & 0x1F), "utf-8")
    if t == 0xC0:
        return None
    if t in (0xC2, 0xC3):
        return t == 0xC3
    if t in _FIXED:
        return r.unpack(_FIXED[t])
    if t in (0xC4, 0xC5, 0xC6):
        n = r.unpack({0xC4: ">B", 0xC5: ">H", 0xC6: ">I"}[t])
        return bytes(r.take(n))
    if t in (0xD9, 0xDA, 0xDB):
        n = r.unpack({0xD9: ">B", 0xDA: ">H", 0xDB: ">I"}[t])
        return str(r.take(n), "utf-8")
    if t in (0xDC, 0xDD):
        n = r.unpack(">H" if t == 0xDC else ">I")
        return [_unpack(r, depth + 1) for _ in range(n)]
    if t in (0xDE, 0xDF):
        return _unpack_map(r, r.unpack(">H" if t == 0xDE else ">I"), depth)
    raise ValueError("msgpack: unsupported type byte 0x%02x at offset %d" % (t, r.pos - 1))


def _unpack_map(r, n, depth):
    out = {}
    for _ in range(n):
        k = _unpack(r, depth + 1)
        if isinstance(k, list):
            k = tuple(k)
        out[k] = _unpack(r, depth + 1)
    return out


def pure_unpackb(data):
    """msgpack bytes -> Python object (ext types unsupported); trailing bytes are an error."""
    r = _Reader(data)
    v = _unpack(r, 0)
    if r.pos != len(r.data):
        raise ValueError("msgpack: %d trailing bytes" % (len(r.data) - r.pos))
    return v


def _default(v):
    """The package's hook for types it does not know: numpy / torch values."""
    if hasattr(v, "tolist") and getattr(v, "ndim", 0) > 0:
        return v.tolist()
    if hasattr(v, "item"):
        return v.item()
    raise TypeError("msgpack: cannot encode %s" % type(v).__name__)


def _no_ext(code, data):
    raise ValueError("msgpack: ext type %d is not supported" % code)


def packb(obj):
    """obj -> msgpack bytes."""
    if _pkg is None:
        return pure_packb(obj)
    try:
        return _pkg.packb(obj, use_bin_type=True, default=_default)
    except (TypeError, ValueError, OverflowError):
        pure_packb(obj)      # raises the same kind of error, naming the path of the bad value
        raise


def unpackb(data):
    """msgpack bytes -> Python object (ext types unsupported); truncated input, trailing bytes
    and unused type bytes raise ValueError."""
    if _pkg is None:
        return pure_unpackb(data)
    try:
        return _pkg.unpackb(data, raw=False, strict_map_key=False, ext_hook=_no_ext)
    except Exception as e:    # the package's FormatError / StackError / ExtraData are ValueErrors
        raise ValueError("msgpack: %s" % (str(e) or type(e).__name__)) from None
