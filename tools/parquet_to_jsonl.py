#!/usr/bin/env python3
"""parquet_to_jsonl.py: verl's prompt parquet files (examples/data_preprocess/*.py write them: one
row per prompt with `prompt` (chat messages), `data_source`, `reward_model` {ground_truth, style},
`extra_info`, `ability`) into the JSON lines data.train_files that verl-trainer reads.

  tools/parquet_to_jsonl.py train.parquet [more.parquet ...] -o train.jsonl

Every column is kept (values as JSON: numpy arrays become lists, bytes are refused naming the
row). Needs pyarrow (pip/conda, or Debian python3-pyarrow where packaged); without it the script
says so and exits 3."""
import argparse
import json
import os
import sys


def to_json(v, where):
    if isinstance(v, dict):
        return {str(k): to_json(x, where) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json(x, where) for x in v]
    if hasattr(v, "tolist"):  # numpy scalars and arrays
        return to_json(v.tolist(), where)
    if isinstance(v, (bytes, bytearray)):
        sys.exit(f"{where}: a bytes value cannot go into JSON")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        print("parquet_to_jsonl.py: pyarrow is not installed. HINT: pip install pyarrow (or convert with pandas "
              "elsewhere: df.to_json(out, orient='records', lines=True))", file=sys.stderr)
        return 3
    n = 0
    tmp = a.out + ".tmp"  # the output appears complete or not at all
    try:
        with open(tmp, "w") as out:
            for path in a.inputs:
                try:
                    table = pq.read_table(path)
                except Exception as e:  # pyarrow's own errors name the problem, not always the file
                    sys.exit(f"{path}: not a readable parquet file: {e}")
                if "prompt" not in table.column_names and "input_ids" not in table.column_names:
                    sys.exit(f"{path}: no 'prompt' (or 'input_ids') column; columns: {', '.join(table.column_names)}")
                for i, row in enumerate(table.to_pylist()):
                    out.write(json.dumps(to_json(row, f"{path} row {i}"), ensure_ascii=False) + "\n")
                    n += 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, a.out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"wrote {a.out}: {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
