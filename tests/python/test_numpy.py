"""numpy / torch-like inputs and verl's padded batches, without Python loops over tokens
(issue 17), against a real checksum server over both transports.

Runs under every interpreter ctest is given: tests/python/CMakeLists.txt registers it as
python_numpy with an interpreter that has numpy and the msgpack package when one is found
(Debian's /usr/bin/python3 with python3-numpy and python3-msgpack), besides python_numpy_default
under ctest's own python. Without numpy only the numpy cases skip, and say why.
"""

import sys
import unittest
from unittest import mock

import vr_testlib
from vr_testlib import Server, checksum_score

from verl_reward import HttpRewardClient, RewardClient, _batch, msgpack
from verl_reward import verl_adapter, verl_reward_loop

try:
    import numpy as np
except ImportError:
    np = None

NO_NUMPY = "numpy not importable by %s (HINT: apt-get install python3-numpy; python_numpy runs this " \
           "module under an interpreter that has it)" % sys.executable
SERVER = None


def setUpModule():
    global SERVER
    print("\ntest_numpy: %s, numpy %s, msgpack codec %s" % (sys.executable, np.__version__ if np else "absent",
                                                             msgpack.BACKEND), file=sys.stderr)
    vr_testlib.need_client_lib()
    SERVER = Server("checksum", tag="np")


def tearDownModule():
    SERVER.stop()


class TorchLike:
    """What pack_* needs of a torch tensor: detach().cpu().numpy() (torch is not installed here)."""

    def __init__(self, a):
        self.a = a
        self.ndim = a.ndim
        self.shape = a.shape

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a


def no_token_loops():
    """Patches the per-sequence list path: a numpy input that reaches it fails the test."""
    return mock.patch.object(_batch, "_as_int_list", side_effect=AssertionError("per-token Python path taken"))


@unittest.skipIf(np is None, NO_NUMPY)
class NumpyPackingTest(unittest.TestCase):
    def padded(self, left):
        rng = np.random.default_rng(7)
        lens = [5, 1, 9, 3]
        ids = np.zeros((4, 9), dtype=np.int64)
        mask = np.zeros((4, 9), dtype=np.int64)
        rows = []
        for i, n in enumerate(lens):
            r = rng.integers(0, 1000, n)
            rows.append(r.tolist())
            sl = slice(9 - n, 9) if left else slice(0, n)
            ids[i, sl] = r
            mask[i, sl] = 1
        return ids, mask, rows

    def test_padded_batches_both_sides(self):
        for left in (True, False):
            ids, mask, rows = self.padded(left)
            with no_token_loops():
                p = _batch.pack_padded(ids, mask)
                self.assertEqual(_batch.pack_sequences({"input_ids": ids, "attention_mask": mask}), (p.ids, p.cu))
                self.assertEqual(_batch.pack_sequences({"input_ids": TorchLike(ids),
                                                        "attention_mask": TorchLike(mask)}), (p.ids, p.cu))
            self.assertEqual([p[i] for i in range(len(p))], rows)
            self.assertEqual(_batch.pack_sequences(rows), (p.ids, p.cu))          # the list path agrees
            # bool and float masks select the same tokens
            self.assertEqual(_batch.pack_padded(ids, mask.astype(bool)).ids, p.ids)
            self.assertEqual(_batch.pack_padded(ids, mask.astype(np.float32)).ids, p.ids)
            # verl_adapter's helpers: the same rows, the last valid token as verl finds it
            self.assertEqual(list(verl_adapter.valid_sequences(ids, mask)), rows)
            # verl's rule, written out: argmax(position_ids * mask), first maximum, position_ids
            # clip(cumsum(mask) - 1, 0) (a left-padded one-token row gives 0, as in verl)
            last = []
            for r in mask.tolist():
                acc, best, arg = 0, None, 0
                for t, m in enumerate(r):
                    acc += m
                    v = max(acc - 1, 0) * m
                    if best is None or v > best:
                        best, arg = v, t
                last.append(arg)
            self.assertEqual(verl_adapter.last_token_index(mask), last)
            self.assertEqual(verl_adapter.last_token_index(mask.tolist()), last)
            self.assertEqual(verl_reward_loop.valid_ids(ids[0], mask[0]), rows[0])

    def test_arrays_and_rows(self):
        a = np.arange(12, dtype=np.int32).reshape(3, 4)
        with no_token_loops():
            self.assertEqual(_batch.pack_sequences(a), (_batch.array("i", range(12)), _batch.array("I", [0, 4, 8, 12])))
            self.assertEqual(_batch.pack_sequences(TorchLike(a)), _batch.pack_sequences(a))
            self.assertEqual(_batch.pack_sequences(a[0]), (_batch.array("i", [0, 1, 2, 3]), _batch.array("I", [0, 4])))
            got = _batch.pack_sequences([a[0], np.array([7], dtype=np.uint16), TorchLike(a[2])])
        self.assertEqual(got, (_batch.array("i", [0, 1, 2, 3, 7, 8, 9, 10, 11]), _batch.array("I", [0, 4, 5, 9])))
        self.assertEqual(_batch.pack_sequences([a[0], [5, 6]]),
                         (_batch.array("i", [0, 1, 2, 3, 5, 6]), _batch.array("I", [0, 4, 6])))

    def test_errors_name_the_sequence(self):
        for bad, seq, what in (([np.array([1]), np.array([2 ** 40])], 1, "outside int32"),
                               (np.array([[1, 2], [3, -(2 ** 35)]]), 1, "outside int32"),
                               (np.array([[1, 2], [3, 2 ** 32]], dtype=np.uint64), 1, "outside int32"),
                               ([np.array([1]), np.array([0.5])], 1, "must be integers (dtype float64)"),
                               (np.zeros((2, 2), dtype=np.float32), 0, "must be integers")):
            with self.assertRaises(_batch.InvalidRequest) as cm:
                _batch.pack_sequences(bad)
            self.assertIn(what, str(cm.exception))
            self.assertEqual(cm.exception.bad_seq, seq)
        with self.assertRaises(TypeError) as cm:
            _batch.pack_padded(np.zeros((2, 3), dtype=np.int64), np.zeros((2, 4)))
        self.assertIn("one (B, T) shape", str(cm.exception))
        with self.assertRaises(TypeError):
            _batch.pack_sequences(np.zeros((1, 2, 3), dtype=np.int32))

    def test_large_batch(self):
        """A verl-sized batch (512 x 4096, left padded) packs in one vectorised pass."""
        rng = np.random.default_rng(1)
        ids = rng.integers(0, 150000, (512, 4096))
        lens = rng.integers(1, 4097, 512)
        mask = (np.arange(4096)[None, :] >= (4096 - lens)[:, None]).astype(np.int64)
        with no_token_loops():
            p = _batch.pack_padded(ids, mask)
        self.assertEqual(len(p), 512)
        self.assertEqual(list(p.cu[1:]), np.cumsum(lens).tolist())
        self.assertEqual(p[3], ids[3, 4096 - lens[3]:].tolist())


@unittest.skipIf(np is None, NO_NUMPY)
class NumpyServerTest(unittest.TestCase):
    def test_padded_batch_scores_over_both_transports(self):
        ids = np.array([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12], [0, 0, 0, 0, 13]], dtype=np.int64)
        mask = (ids != 0).astype(np.int64)
        want = [checksum_score([5, 6, 7]), checksum_score([8, 9, 10, 11, 12]), checksum_score([13])]
        batch = {"input_ids": ids, "attention_mask": mask}
        with RewardClient(SERVER.shm_name) as rc, HttpRewardClient(SERVER.url) as hc:
            with no_token_loops():
                self.assertEqual(rc.score(batch), want)
                self.assertEqual(hc.score(batch), want)
                self.assertEqual(rc.score(_batch.pack_padded(TorchLike(ids), TorchLike(mask))), want)
                self.assertEqual(rc.score(ids[1]), [want[1]])
            extras = [{"ground_truth": np.int64(3), "extra_info": {"v": np.arange(3)}}, None, {"n": np.float32(1)}]
            self.assertEqual(hc.score(batch, extras), want)     # numpy values in extras travel too
            self.assertEqual(rc.score(batch, extras), want)


class CodecOverHttpTest(unittest.TestCase):
    """HttpRewardClient speaks msgpack with the package, JSON without; same scores."""

    def test_same_scores(self):
        seqs = [[1, 2, 3], [4], list(range(100))]
        with HttpRewardClient(SERVER.url) as hc:
            sent = []
            orig = hc._request

            def spy(path, body, ctype="application/json", method="POST"):
                sent.append(ctype)
                return orig(path, body, ctype, method)
            with mock.patch.object(hc, "_request", side_effect=spy):
                got = hc.score(seqs, [{"ground_truth": "1"}, None, {"solution_str": "x"}])
        self.assertEqual(got, [checksum_score(s) for s in seqs])
        self.assertEqual(sent, ["application/msgpack" if msgpack.BACKEND == "msgpack" else "application/json"])


if __name__ == "__main__":
    unittest.main()
