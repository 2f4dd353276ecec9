#!/usr/bin/env python3
"""verl-jinja-render end to end: a golden chat case through --chat, a plain render with a
context file, and the exit status and message of a template error and of a bad file."""
import json
import os
import subprocess
import sys
import tempfile

BIN, FIX = sys.argv[1], sys.argv[2]
fails = 0


def check(cond, what):
    global fails
    if not cond:
        print("FAIL:", what)
        fails += 1


doc = json.load(open(os.path.join(FIX, "chat", "qwen3.json"), encoding="utf-8"))
case = next(c for c in doc["cases"] if "expected" in c and c.get("extra") is None and "tools" not in c)
with tempfile.TemporaryDirectory() as d:
    t = os.path.join(d, "t.jinja")
    with open(t, "w", encoding="utf-8") as f:
        f.write(doc["template"])
    ctx = {"messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"],
           "eos_token": doc["eos_token"], "extra": {k: v for k, v in doc["special_tokens"].items() if k != "eos_token"}}
    c = os.path.join(d, "c.json")
    with open(c, "w", encoding="utf-8") as f:
        json.dump(ctx, f)
    p = subprocess.run([BIN, t, c, "--chat"], capture_output=True)
    check(p.returncode == 0 and p.stdout.decode() == case["expected"], f"--chat render of qwen3 [{case['id']}]: {p.stderr}")
    with open(t, "w") as f:
        f.write("{% for x in xs %}{{ x | upper }}{% if not loop.last %},{% endif %}{% endfor %}")
    with open(c, "w") as f:
        json.dump({"xs": ["a", "b"]}, f)
    p = subprocess.run([BIN, t, c], capture_output=True)
    check(p.returncode == 0 and p.stdout == b"A,B", f"plain render: {p.stdout} {p.stderr}")
    with open(t, "w") as f:
        f.write("ok\n{{ raise_exception('nope') }}")
    p = subprocess.run([BIN, t], capture_output=True)
    check(p.returncode == 1 and b"line 2: template raised: nope" in p.stderr, f"raise_exception: {p.stderr}")
    p = subprocess.run([BIN, os.path.join(d, "missing.jinja")], capture_output=True)
    check(p.returncode == 1 and b"cannot read" in p.stderr, f"missing file: {p.stderr}")
    p = subprocess.run([BIN], capture_output=True)
    check(p.returncode == 2 and b"usage" in p.stderr, "usage")
print("test_render_cli:", "ok" if not fails else f"{fails} failures")
sys.exit(1 if fails else 0)
