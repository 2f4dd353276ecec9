"""Unit tests of the pure-Python parts: msgpack, the status table against
include/verl_reward/status.h, error mapping, input packing, library lookup."""

import math
import os
import re
import struct
import subprocess
import sys
import unittest
from array import array

import vr_testlib
from verl_reward import _batch, _lib, errors, msgpack


class MsgpackTest(unittest.TestCase):
    """The codec the client uses (the msgpack package when importable, else the pure one);
    PureMsgpackTest runs the same cases on the pure codec always."""
    packb = staticmethod(msgpack.packb)
    unpackb = staticmethod(msgpack.unpackb)
    pure = msgpack.BACKEND == "pure"

    @classmethod
    def setUpClass(cls):
        print("\n%s: codec %s (%s)" % (cls.__name__, "pure" if cls.pure else "msgpack package",
                                       msgpack.__name__), file=sys.stderr)

    def roundtrip(self, v):
        self.assertEqual(self.unpackb(self.packb(v)), v)

    def test_known_encodings(self):
        # Byte strings from the msgpack spec.
        cases = [
            (None, b"\xc0"), (True, b"\xc3"), (False, b"\xc2"),
            (0, b"\x00"), (127, b"\x7f"), (128, b"\xcc\x80"), (256, b"\xcd\x01\x00"),
            (65536, b"\xce\x00\x01\x00\x00"), (2 ** 32, b"\xcf\x00\x00\x00\x01\x00\x00\x00\x00"),
            (-1, b"\xff"), (-32, b"\xe0"), (-33, b"\xd0\xdf"), (-129, b"\xd1\xff\x7f"),
            (-(2 ** 31), b"\xd2\x80\x00\x00\x00"), (-(2 ** 63), b"\xd3\x80" + b"\x00" * 7),
            (1.5, b"\xcb" + struct.pack(">d", 1.5)),
            ("", b"\xa0"), ("a", b"\xa1a"), ("x" * 32, b"\xd9\x20" + b"x" * 32),
            ("x" * 256, b"\xda\x01\x00" + b"x" * 256),
            (b"\x00\x01", b"\xc4\x02\x00\x01"),
            ([], b"\x90"), ([1, 2], b"\x92\x01\x02"), ({}, b"\x80"),
            ({"a": 1}, b"\x81\xa1a\x01"),
        ]
        for v, want in cases:
            with self.subTest(v=repr(v)[:40]):
                self.assertEqual(self.packb(v), want)
                self.roundtrip(v)

    def test_large_containers(self):
        self.roundtrip(list(range(70000)))
        self.roundtrip({str(i): i for i in range(20)})
        self.assertEqual(self.packb(list(range(16)))[:3], b"\xdc\x00\x10")
        self.assertEqual(self.packb({str(i): 0 for i in range(16)})[:3], b"\xde\x00\x10")
        self.roundtrip(b"z" * 70000)
        self.roundtrip("é" * 40000)

    def test_extras_shape(self):
        v = {"data_source": "openai/gsm8k", "solution_str": "#### 42", "ground_truth": "42",
             "extra_info": {"index": 3, "split": "train", "tags": ["a", None, 2.5, False]}}
        self.roundtrip(v)

    def test_tuple_and_nan(self):
        self.assertEqual(self.unpackb(self.packb((1, "a"))), [1, "a"])
        self.assertTrue(math.isnan(self.unpackb(self.packb(float("nan")))))

    def test_rejects(self):
        with self.assertRaises(TypeError) as cm:
            self.packb({"a": {1, 2}})
        self.assertIn("$.a", str(cm.exception))
        with self.assertRaises(OverflowError):
            self.packb(2 ** 64)
        with self.assertRaises(OverflowError):
            self.packb(-(2 ** 63) - 1)
        nested = []
        for _ in range(70 if self.pure else 600):   # the pure codec stops at 64, the package near 500
            nested = [nested]
        with self.assertRaises(ValueError):
            self.packb(nested)
        with self.assertRaises(ValueError):
            self.unpackb(b"\x92\x01")          # truncated array
        with self.assertRaises(ValueError):
            self.unpackb(b"\x01\x02")          # trailing byte
        with self.assertRaises(ValueError):
            self.unpackb(b"\xc1")              # never-used type byte


class PureMsgpackTest(MsgpackTest):
    packb = staticmethod(msgpack.pure_packb)
    unpackb = staticmethod(msgpack.pure_unpackb)
    pure = True


class MsgpackBackendTest(unittest.TestCase):
    CORPUS = [None, True, False, 0, 127, 128, -32, -33, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, 2 ** 64 - 1,
              -(2 ** 63), 0.1, -1.5e300, float("inf"), "", "a" * 31, "b" * 32, "c" * 255, "d" * 256, "é" * 40000,
              b"", b"x" * 255, b"y" * 256, b"z" * 70000, [], list(range(15)), list(range(16)), list(range(70000)),
              {}, {str(i): i for i in range(15)}, {str(i): i for i in range(16)},
              {"data_source": "openai/gsm8k", "solution_str": "#### 42", "ground_truth": "42",
               "extra_info": {"index": 3, "split": "train", "tags": ["a", None, 2.5, False]}}]

    @unittest.skipIf(msgpack.BACKEND != "msgpack", "the msgpack package is not importable by %s "
                     "(HINT: apt-get install python3-msgpack): only the pure codec runs here" % sys.executable)
    def test_package_writes_the_pure_bytes(self):
        for v in self.CORPUS:
            with self.subTest(v=repr(v)[:40]):
                self.assertEqual(msgpack.packb(v), msgpack.pure_packb(v))
                self.assertEqual(msgpack.pure_unpackb(msgpack.packb(v)), msgpack.unpackb(msgpack.pure_packb(v)))
        try:
            import numpy as np
        except ImportError:
            return
        v = {"i": np.int64(3), "a": np.arange(4, dtype=np.int32), "f": np.float32(0.5), "b": np.bool_(True)}
        self.assertEqual(msgpack.packb(v), msgpack.pure_packb(v))
        with self.assertRaises(TypeError) as cm:      # the package's refusal names the path like the pure one
            msgpack.packb({"a": [1, {2}]})
        self.assertIn("$.a[1]", str(cm.exception))

    def test_forced_fallback(self):
        """Without an importable msgpack package the client runs on the pure codec."""
        code = ("import sys; sys.modules['msgpack'] = None\n"
                "from verl_reward import msgpack, _batch\n"
                "assert msgpack.BACKEND == 'pure', msgpack.BACKEND\n"
                "out = _batch.pack_extras([{'ground_truth': '42', 'n': [1, 2.5]}, None], 2)\n"
                "sys.stdout.write(out[0].hex())\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(bytes.fromhex(p.stdout), msgpack.packb({"ground_truth": "42", "n": [1, 2.5]}))


class StatusTableTest(unittest.TestCase):
    def header_table(self):
        path = os.path.join(vr_testlib.SOURCE_DIR, "include", "verl_reward", "status.h")
        with open(path) as f:
            text = f.read()
        rows = re.findall(r'X\((VR_[A-Z0-9_]+),\s*(-?\d+),\s*"((?:[^"\\]|\\.)*)"\)', text)
        self.assertGreater(len(rows), 20, "could not parse %s" % path)
        return [(int(v), n, m) for n, v, m in rows]

    def test_table_matches_header(self):
        self.assertEqual(list(errors.STATUS_TABLE), self.header_table(),
                         "python/verl_reward/errors.py STATUS_TABLE differs from status.h: update it")

    def test_every_error_code_has_a_class(self):
        for value, name, _ in self.header_table():
            if value == 0:
                continue
            with self.subTest(name=name):
                self.assertIn(value, errors.ERROR_CLASSES)
                e = errors.error_for(value, "detail")
                self.assertIsInstance(e, errors.VerlRewardError)
                self.assertEqual((e.code, e.name, e.message), (value, name, "detail"))
                self.assertIn(name, str(e))

    def test_mapping(self):
        V = errors.STATUS_VALUES
        want = {
            "VR_ERR_SERVER_GONE": errors.ServerGone, "VR_ERR_SERVER_RESTARTED": errors.ServerRestarted,
            "VR_ERR_TOO_LARGE": errors.RequestTooLarge, "VR_ERR_SEQ_TOO_LONG": errors.RequestTooLarge,
            "VR_ERR_TIMEOUT": errors.Timeout, "VR_ERR_OVERLOADED": errors.Overloaded,
            "VR_ERR_BUSY": errors.Overloaded, "VR_ERR_INVAL": errors.InvalidRequest,
            "VR_ERR_TOKEN_RANGE": errors.InvalidRequest, "VR_ERR_EMPTY_SEQ": errors.InvalidRequest,
            "VR_ERR_NOT_FOUND": errors.ConnectFailed, "VR_ERR_SHUTTING_DOWN": errors.ServerGone,
        }
        for name, cls in want.items():
            with self.subTest(name=name):
                self.assertIsInstance(errors.error_for(V[name]), cls)
        self.assertIsInstance(errors.error_for(V["VR_ERR_TIMEOUT"]), TimeoutError)
        unknown = errors.error_for(-9999, "from a newer server")
        self.assertIs(type(unknown), errors.VerlRewardError)
        self.assertEqual(unknown.code, -9999)
        self.assertEqual(errors.error_for(V["VR_ERR_TOKEN_RANGE"], "x", 3).bad_seq, 3)


class PackingTest(unittest.TestCase):
    def test_lists(self):
        ids, cu = _batch.pack_sequences([[1, 2, 3], [4], [5, 6]])
        self.assertEqual(ids, array("i", [1, 2, 3, 4, 5, 6]))
        self.assertEqual(cu, array("I", [0, 3, 4, 6]))

    def test_tensor_like_rows(self):
        class Row:                       # a 1-D tensor stand-in: ndim + tolist
            ndim = 1

            def __init__(self, v):
                self.v = v

            def tolist(self):
                return list(self.v)

        class Mat:                       # 2-D: iterable of rows
            ndim = 2

            def __init__(self, rows):
                self.rows = [Row(r) for r in rows]

            def __iter__(self):
                return iter(self.rows)

        ids, cu = _batch.pack_sequences(Mat([[7, 8], [9, 10]]))
        self.assertEqual((ids.tolist(), cu.tolist()), ([7, 8, 9, 10], [0, 2, 4]))

    def test_bad_input(self):
        with self.assertRaises(errors.InvalidRequest) as cm:
            _batch.pack_sequences([[1], [2 ** 31]])
        self.assertEqual(cm.exception.bad_seq, 1)
        with self.assertRaises(errors.InvalidRequest):
            _batch.pack_sequences([[1.5]])

    def test_forms(self):
        """A flat list of ints (or a 1-D array) is one sequence; a list of lists a batch;
        anything else a TypeError (also an InvalidRequest) naming the accepted forms."""
        one = _batch.pack_sequences([5, 6, 7])
        self.assertEqual((one[0].tolist(), one[1].tolist()), ([5, 6, 7], [0, 3]))
        self.assertEqual(_batch.pack_sequences((5, 6, 7)), one)
        self.assertEqual(_batch.pack_sequences([[5, 6, 7]]), one)
        self.assertEqual(_batch.pack_sequences([]), (array("i"), array("I", [0])))
        for bad, what in ((5, "int"), ("abc", "str"), ({"a": 1}, "dict"), ([1, [2]], "item 1 is list"),
                          ([1, 2.0], "item 1 is float"), ([True, 1], "item 0 is bool"), (["abc"], "item 0 is str"),
                          ([[1], 2], "item 1 is int")):
            with self.assertRaises(TypeError) as cm:
                _batch.pack_sequences(bad)
            self.assertIsInstance(cm.exception, errors.InvalidRequest)
            self.assertIn("a list of ints (one sequence), a list of token-id lists (a batch)", str(cm.exception))
            self.assertIn(what, str(cm.exception))
        try:
            import numpy as np
        except ImportError:
            return
        self.assertEqual(_batch.pack_sequences(np.array([5, 6, 7], dtype=np.int64)), one)
        self.assertEqual(_batch.pack_sequences([np.int32(5), np.int64(6), 7]), one)
        self.assertEqual(_batch.pack_sequences(np.array([[5, 6, 7]])), one)
        with self.assertRaises(TypeError) as cm:
            _batch.pack_sequences(np.zeros((1, 2, 3), dtype=np.int32))
        self.assertIn("3-D", str(cm.exception))

    def test_url_forms(self):
        from verl_reward.http import normalize_url
        for given in ("127.0.0.1:8080", "http://127.0.0.1:8080", "http://127.0.0.1:8080/", "HTTP://127.0.0.1:8080",
                      " 127.0.0.1:8080// "):
            self.assertEqual(normalize_url(given), "http://127.0.0.1:8080")
        self.assertEqual(normalize_url("localhost:8080/"), "http://localhost:8080")
        for bad, why in (("https://h:1", "plain HTTP, not https"), ("ftp://h:1", "unsupported scheme"),
                         ("", "non-empty"), ("http://", "no host"), (None, "non-empty")):
            with self.assertRaises(ValueError) as cm:
                normalize_url(bad)
            self.assertIn(why, str(cm.exception))

    def test_extras(self):
        self.assertIsNone(_batch.pack_extras(None, 2))
        out = _batch.pack_extras([{"a": 1}, None, b"\x80"], 3)
        self.assertEqual(out, [msgpack.packb({"a": 1}), None, b"\x80"])
        with self.assertRaises(errors.InvalidRequest):
            _batch.pack_extras([{"a": 1}], 2)
        with self.assertRaises(errors.InvalidRequest):
            _batch.pack_extras([{"a": object()}], 1)
        with self.assertRaises(errors.InvalidRequest):
            _batch.pack_extras(["str"], 1)


class HttpErrorBodyTest(unittest.TestCase):
    def test_server_error_bodies(self):
        from verl_reward.http import _error_from_body
        e = _error_from_body(400, b'{"error": {"code": "VR_ERR_TOKEN_RANGE", "status": -11, '
                                  b'"message": "sequence 3: token id outside", "sequence": 3}}')
        self.assertIsInstance(e, errors.InvalidRequest)
        self.assertEqual((e.code, e.bad_seq), (-11, 3))
        self.assertIn("sequence 3: token id outside", e.message)
        e = _error_from_body(413, b'{"error":{"code":"VR_ERR_TOO_LARGE","message":"x"}}')
        self.assertIsInstance(e, errors.RequestTooLarge)
        e = _error_from_body(502, b"<html>bad gateway</html>")
        self.assertIsInstance(e, errors.ServerError)
        self.assertIn("bad gateway", e.message)
        self.assertIsInstance(_error_from_body(503, b""), errors.ShuttingDown)
        self.assertIsInstance(_error_from_body(429, b"{}"), errors.Overloaded)


class LookupTest(unittest.TestCase):
    def run_py(self, code, env):
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              timeout=60)

    def test_missing_env_path_is_an_error_listing_places(self):
        env = vr_testlib.python_env(VERL_REWARD_LIB="/nonexistent/dir/libverl_reward_client.so")
        r = self.run_py("import verl_reward as v\ntry:\n v.RewardClient('x')\nexcept v.LibraryNotFound as e:\n"
                        " print(e)\n raise SystemExit(3)\n", env)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("VERL_REWARD_LIB: /nonexistent/dir/libverl_reward_client.so (no such file)", r.stdout)
        self.assertIn("HINT", r.stdout)

    @staticmethod
    def loaded_libc():
        """The libc this interpreter runs on (any architecture's path), from /proc/self/maps."""
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if re.search(r"/libc(-[0-9.]+)?\.so(\.[0-9]+)?$", path):
                    return path
        raise AssertionError("no libc in /proc/self/maps")

    def test_not_the_client_library(self):
        # A real shared object without the client's symbols is rejected with a reason.
        libc = self.loaded_libc()
        env = vr_testlib.python_env(VERL_REWARD_LIB=libc)
        r = self.run_py("import verl_reward._lib as l\nl.candidate_paths = lambda: [('VERL_REWARD_LIB', %r)]\n"
                        "try:\n l.load_library()\nexcept l.LibraryNotFound as e:\n print(e)\n"
                        " raise SystemExit(3)\n" % libc, env)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("not the client library", r.stdout)

    def test_candidate_order(self):
        env_dir = "/some/dir"
        old = os.environ.get("VERL_REWARD_LIB")
        os.environ["VERL_REWARD_LIB"] = env_dir
        try:
            places = [p for p, _ in _lib.candidate_paths()]
            paths = [x for _, x in _lib.candidate_paths()]
        finally:
            if old is None:
                del os.environ["VERL_REWARD_LIB"]
            else:
                os.environ["VERL_REWARD_LIB"] = old
        self.assertEqual(places[0], "VERL_REWARD_LIB")
        self.assertEqual(paths[0], env_dir)           # not a directory here: taken as a file path
        self.assertEqual(places[1], "next to the package")
        self.assertEqual(places[-1], "system path")


if __name__ == "__main__":
    unittest.main()
