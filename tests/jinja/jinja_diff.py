#!/usr/bin/env python3
"""Differential test of tokenizer/jinja against real jinja2 (configured as transformers does).

Generates random templates (expressions over many types, filters, tests, methods, if/for/set,
whitespace control, comments) from a fixed seed, renders each with jinja2, and has
test_jinja_golden --cases check that the C engine renders the same bytes, or fails where
jinja2 fails. Where the engine refuses a construct on purpose (VR_ERR_UNSUPPORTED: printing a
generator, which jinja2 prints as a memory address; case mapping of non-ASCII letters) the
case counts as refused; refusals may be at most 2% of the cases.

    python3 tests/jinja/jinja_diff.py CHECKER [SEED] [N] [CHAT_FIXTURE_DIR]

With CHAT_FIXTURE_DIR (tests/fixtures/chat), also 60 random conversations per real chat
template, rendered by jinja2 with the variables transformers passes, checked the same way.
"""
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "fixtures"))
import make_jinja_cases as M  # noqa: E402

ATOMS = ["n", "f", "xs", "none", "t", "d", "s", "words", "empty", "name", "missing", "1", "0", "-3",
         "2.5", "'ab'", "''", "'a b'", "[1, 'x']", "[]", "{'k': 1}", "true", "false", "none",
         "people", "d.a", "d.c", "xs[0]", "s[1:4]", "messages", "messages[0]", "messages[1].content"]
BIN = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
FILT = ["length", "trim", "upper", "lower", "string", "int", "float", "list", "first", "last",
        "reverse", "sort", "unique", "tojson", "join(',')", "default('D')", "items", "abs", "round",
        "capitalize", "title", "count", "e", "safe", "selectattr('age')", "map(attribute='name')",
        "select('odd')", "reject('none')", "indent(2)", "tojson(indent=1)", "dictsort", "sum", "max",
        "min", "batch(2)", "replace('a','b')", "list | first", "map('string') | join('-')",
        "selectattr('age', 'gt', 26) | list", "d('x')", "trim('H ')", "int(5)", "first | string"]
TESTS = ["defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence",
         "boolean", "true", "false", "odd", "even", "integer", "float", "divisibleby(2)", "eq 1",
         "in xs", "lower", "upper"]
METH = [".strip()", ".upper()", ".split()", ".split(',')", ".startswith('a')", ".endswith('b')",
        ".replace('l','L')", ".lstrip('H')", ".items()", ".keys()", ".get('a')", ".count(1)",
        ".find('o')", ".title()", ".rstrip()", ".values()", ".get('zz', 3)"]


def gen(rnd, n):
    def expr(depth=0):
        r = rnd.random()
        if depth > 3 or r < 0.3:
            return rnd.choice(ATOMS)
        if r < 0.5:
            return f"({expr(depth + 1)} {rnd.choice(BIN)} {expr(depth + 1)})"
        if r < 0.65:
            return f"{expr(depth + 1)} | {rnd.choice(FILT)}"
        if r < 0.75:
            return f"({expr(depth + 1)} is {'not ' if rnd.random() < 0.3 else ''}{rnd.choice(TESTS)})"
        if r < 0.85:
            return f"{rnd.choice(ATOMS)}{rnd.choice(METH)}"
        if r < 0.9:
            return f"({expr(depth + 1)} if {expr(depth + 1)} else {expr(depth + 1)})"
        if r < 0.95:
            return f"not {expr(depth + 1)}"
        return f"{rnd.choice(['xs', 's', 'words', 'people', 'messages'])}[{rnd.choice(['0', '-1', '1:', '::-1', ':2', '1:-1', '::2'])}]"

    def stmt(depth=0):
        r = rnd.random()
        ws = rnd.choice(["", " ", "\n", "\n  ", "|", "\t"])
        lt, rt = rnd.choice(["{%", "{%-", "{%+"]), rnd.choice(["%}", "-%}", "+%}"])
        if depth > 2 or r < 0.4:
            return rnd.choice(["{{ ", "{{- "]) + expr() + rnd.choice([" }}", " -}}"]) + ws
        if r < 0.6:
            return f"{lt} if {expr()} {rt}\n{stmt(depth + 1)}{lt} else {rt}{stmt(depth + 1)}{lt} endif {rt}{ws}"
        if r < 0.75:
            it = rnd.choice(["xs", "words", "people", "d", "s", "empty", "missing", "d.items()", "range(3)", "messages"])
            cond = f" if {expr()}" if rnd.random() < 0.2 else ""
            return (f"{lt} for v in {it}{cond} {rt}\n  {stmt(depth + 1)}{{{{ loop.index }}}}"
                    f"{{% if loop.last %}}L{{% endif %}}{lt} endfor {rt}{ws}")
        if r < 0.85:
            return "{% set q = " + expr() + " %}{{ q }}" + ws
        return rnd.choice(["  {# c #}\n", "{#- c -#}", "\t{# c #}"]) + stmt(depth + 1)

    env = M.transformers_env()
    rows = []
    i = 0
    while len(rows) < n:
        t = "".join(stmt() for _ in range(rnd.randint(1, 3)))
        ctx = json.loads(json.dumps(M.CTX))
        row = {"id": f"r{i}", "template": t, "context": json.loads(json.dumps(M.CTX))}
        i += 1
        try:
            row["expected"] = env.from_string(t).render(**ctx)
        except Exception as ex:  # noqa: BLE001
            row["error"] = type(ex).__name__
        if " at 0x" in row.get("expected", "").lower():
            continue  # jinja2 printed an object's address: nothing to compare
        rows.append(row)
    return rows


WORDS = ["Hello", "the", "answer", "is", "42", "ü", "中文", "🙂", "{{ x }}", "{% if %}", "'q'", '"dq"', "\\n",
         "<think>", "</think>", "\n", "  ", "\t", "tool", "<tool_call>", "#", "</s>", "<|im_end|>"]


def gen_chats(rnd, tdir, per_template):
    """Random conversations over the real templates of tests/fixtures/chat, rendered by jinja2
    with the variables transformers passes (special tokens, messages, tools, documents,
    add_generation_prompt, kwargs): the golden files' format, for test_jinja_golden DIR."""
    env = M.transformers_env()
    docs = {}
    for fn in sorted(os.listdir(tdir)):
        if not fn.endswith(".json"):
            continue
        with open(os.path.join(tdir, fn), encoding="utf-8") as f:
            g = json.load(f)
        tmpl = env.from_string(g["template"])
        cases = []
        for i in range(per_template):
            roles = rnd.choice([["user"], ["system", "user"], ["user", "assistant"], ["system", "user", "assistant"],
                                ["user", "assistant", "user"], ["user", "user"], ["assistant"], ["system", "user", "assistant", "user", "assistant"]])
            msgs = []
            for r in roles:
                content = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(0, 6)))
                if r == "assistant" and rnd.random() < 0.3:
                    content = "<think>\n" + content + "\n</think>\n\n" + rnd.choice(WORDS)
                msgs.append({"role": r, "content": content})
            if rnd.random() < 0.2 and msgs[-1]["role"] == "assistant":
                msgs.append({"role": "tool", "content": "{\"ok\": true}"})
            agp = rnd.random() < 0.5
            kw = {"enable_thinking": rnd.random() < 0.5} if rnd.random() < 0.3 else {}
            ctx = dict(g["special_tokens"])
            ctx.update(kw)
            row = {"id": f"rand{i}", "messages": msgs, "add_generation_prompt": agp}
            if kw:
                row["extra"] = kw
            try:
                row["expected"] = tmpl.render(messages=json.loads(json.dumps(msgs)), tools=None, documents=None,
                                              add_generation_prompt=agp, **ctx)
            except Exception as ex:  # noqa: BLE001
                row["error"] = f"{type(ex).__name__}: {ex}"
            cases.append(row)
        g["cases"] = cases
        docs[fn] = g
    return docs


def main():
    checker = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 1500
    chat_dir = sys.argv[4] if len(sys.argv) > 4 else None
    rnd = random.Random(seed)
    rows = gen(rnd, n)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "cases.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"cases": rows}, f, ensure_ascii=False)
        rc = subprocess.run([checker, "--cases", path, "--max-refused-pct", "2"]).returncode
        if chat_dir:  # random conversations over the real chat templates
            cd = os.path.join(d, "chat")
            os.makedirs(cd)
            for fn, g in gen_chats(rnd, chat_dir, 60).items():
                with open(os.path.join(cd, fn), "w", encoding="utf-8") as f:
                    json.dump(g, f, ensure_ascii=False)
            rc |= subprocess.run([checker, cd]).returncode
    sys.exit(rc)


if __name__ == "__main__":
    main()
