#!/usr/bin/env python3
"""tools/parquet_to_jsonl.py: verl's prompt parquet files -> the JSON lines verl-trainer reads.

TestNoPyarrow runs everywhere (a pyarrow that fails to import: exit 3, a hint, no output file).
TestConvert needs pyarrow (the GPU machine has it; CI does not, and says it skipped): a table laid
out as verl's examples/data_preprocess/gsm8k.py writes it (prompt as a list of {role, content},
data_source, ability, reward_model {style, ground_truth}, extra_info {split, index, ...}) comes
back row for row; a bytes value, a table without a prompt column and a file that is not parquet
are refused naming the file (and the row), leaving no output behind."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "parquet_to_jsonl.py")

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:
    pa = None


def run(args, env=None):
    return subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True, env=env, timeout=60)


class TestNoPyarrow(unittest.TestCase):
    def test_exit_3_with_hint(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "fake", "pyarrow"))
            with open(os.path.join(d, "fake", "pyarrow", "__init__.py"), "w") as f:
                f.write("raise ImportError('pyarrow withheld by the test')\n")
            env = dict(os.environ, PYTHONPATH=os.path.join(d, "fake"))
            out = os.path.join(d, "x.jsonl")
            r = run([os.path.join(d, "in.parquet"), "-o", out], env)
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("pyarrow is not installed", r.stderr)
            self.assertFalse(os.path.exists(out))


ROWS = [
    {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": f"Natalia sold clips to {n} friends. How many? Let's think step by step."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(2 * n)},
        "extra_info": {"split": "train", "index": n, "answer": f"#### {2 * n}", "question": "clips"},
    }
    for n in range(5)
]


@unittest.skipIf(pa is None, "pyarrow is not installed here (the GPU machine runs this)")
class TestConvert(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def test_verl_gsm8k_layout_round_trips(self):
        a, b = os.path.join(self.d, "a.parquet"), os.path.join(self.d, "b.parquet")
        pq.write_table(pa.Table.from_pylist(ROWS[:3]), a)
        pq.write_table(pa.Table.from_pylist(ROWS[3:]), b)
        out = os.path.join(self.d, "train.jsonl")
        r = run([a, b, "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("5 rows", r.stdout)
        with open(out) as f:
            got = [json.loads(line) for line in f]
        self.assertEqual(got, ROWS)
        self.assertFalse(os.path.exists(out + ".tmp"))

    def test_list_column_becomes_list(self):  # numpy arrays from pandas-written files
        p = os.path.join(self.d, "ids.parquet")
        pq.write_table(pa.table({"input_ids": pa.array([[1, 2, 3], [4]], pa.list_(pa.int32()))}), p)
        out = os.path.join(self.d, "ids.jsonl")
        r = run([p, "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            self.assertEqual([json.loads(line) for line in f], [{"input_ids": [1, 2, 3]}, {"input_ids": [4]}])

    def test_refusals_name_the_problem_and_leave_nothing(self):
        out = os.path.join(self.d, "o.jsonl")
        bad = os.path.join(self.d, "bytes.parquet")
        pq.write_table(pa.table({"prompt": ["hi", "there"], "blob": pa.array([b"x", b"\x00y"], pa.binary())}), bad)
        r = run([bad, "-o", out])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("bytes.parquet row 0", r.stderr)
        self.assertFalse(os.path.exists(out))
        noprompt = os.path.join(self.d, "noprompt.parquet")
        pq.write_table(pa.table({"question": ["q"]}), noprompt)
        r = run([noprompt, "-o", out])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("noprompt.parquet: no 'prompt'", r.stderr)
        self.assertIn("question", r.stderr)
        junk = os.path.join(self.d, "junk.parquet")
        with open(junk, "wb") as f:
            f.write(b"PAR1 this is not parquet")
        r = run([junk, "-o", out])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("junk.parquet: not a readable parquet file", r.stderr)
        self.assertFalse(os.path.exists(out) or os.path.exists(out + ".tmp"))


if __name__ == "__main__":
    unittest.main()
