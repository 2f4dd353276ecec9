#!/usr/bin/env python3
"""Checks that the flags and config keys README.md and docs/*.md name exist.

    tools/check_docs.py --bin build/bin [--docs FILE ...] [-v]

What it checks (standard library only; the binaries must be built):

  flags      every `--flag` of a command line in the docs (a code-block line or an inline code
             span that runs one of our binaries, `verl-trainer sft ...` by its subcommand) must
             be in that binary's --help; every other `--flag` the docs name must be in the
             --help of some binary of ours, in the argparse table of a tools/*.py script, or
             in EXTERNAL (flags of mpirun, cmake, curl, ... that the docs quote).
  tables     a docs table of flags (rows starting with `| `--flag`) belongs to the binary its
             section names (TABLES, by heading); each of its flags must be in that binary's
             --help, and for the binaries whose whole flag set a table documents (FULL), each
             flag of the --help must be in one of its tables.
  yaml       the YAML blocks of the docs and the configs in docs/examples/: a trainer config
             (a data / actor_rollout_ref / critic / algorithm / trainer section) and a device map
             go through `verl-trainer --check` (every key must be known: the trainer refuses an
             unknown one; a map with node-qualified ids against the docs/examples/topology_*.yaml
             files until one accepts it), a --topology file (a lone `nodes` key) through
             `--check --topology`, a server config file's keys must be server flags; verl's own YAML
             (reward_model, custom_reward_function, reward sections) and others are skipped.
  keys       every dotted trainer key in a code span (`trainer.reward_timeout_s`,
             `actor_rollout_ref.rollout.top_k`, ...) is written into a config of its own and
             must not be refused as an unknown key by `verl-trainer --check`.

Exit status: 0 all true, 1 something named in the docs does not exist (each listed as
FILE:LINE: what), 2 the check could not run (a binary missing).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DOCS = ["README.md", "docs/operations.md", "docs/protocol.md", "docs/training.md", "docs/benchmarks.md"]
BINARIES = ["verl-reward-server", "verl-reward-score", "verl-reward-bench", "verl-shm-bench",
            "verl-reward-rules-bench", "verl-trainer", "verl-tokenize"]
# Programs a CPU build does not make (CUDA benches): their flags are the "--x" literals of their source.
SOURCE_PROGRAMS = {"cuda_kernel_bench": "tests/cuda/cuda_kernel_bench.c",
                   "cuda_attention_bench": "tests/cuda/cuda_attention_bench.cu",
                   "cuda_bench_runner": "tests/cuda/cuda_bench_runner.c",
                   "cuda_train_bench": "tests/cuda/cuda_train_bench.c",
                   "cuda_rollout_bench": "tests/cuda/cuda_rollout_bench.c",
                   "bench_train_dp": "tests/trainer/bench_train_dp.c"}
for _d in ("tools", "tests/cuda"):  # shell scripts: their case patterns and literals
    SOURCE_PROGRAMS.update({f: f"{_d}/{f}" for f in os.listdir(os.path.join(SRC, _d)) if f.endswith(".sh")})
SUBCOMMANDS = {"verl-trainer": ["logprobs", "sft", "generate"]}
# Flags of other programs that the docs quote (mpirun, cmake, ctest, curl, pip, git, python, ...).
EXTERNAL = {"--oversubscribe", "--bind-to", "--allow-run-as-root", "--output-on-failure", "--build",
            "--target", "--data", "--data-binary", "--always", "--dirty", "--check", "--user",
            "--privileged", "--gpus", "--network", "--rm", "--device", "--ipc", "--shm-size",
            "--cap-add", "--security-opt", "--name", "--tag", "--file", "--no-cache", "--prefix",
            "--config", "--np", "--host", "--hostfile", "--mca", "--map-by", "--rank-by", "--ntasks",
            "--nodes", "--gres", "--cpus-per-task", "--mpi", "--nproc-per-node", "--nnodes",
            "--save", "--model", "--help", "--version", "--reward.remote_url", "--fake-data", "--test-dir",
            "--no-build-isolation", "--no-index", "--remote_rm_url", "--pid", "--no-create-home", "--shell",
            "--system", "--now", "--build-arg",
            "--value"}  # the docs' placeholder in `--flag=--value`
# Flag tables by the heading they sit under: the binary whose --help they document.
TABLES = {"Flags": "verl-reward-server", "Load testing": "verl-reward-bench",
          "Transport only: `verl-shm-bench`": "verl-shm-bench",
          "Reward models and verl-reward-score": "verl-reward-score",
          "The CUDA backend (`--device cuda[:N]`)": "verl-reward-server",
          "verl-trainer": "verl-trainer"}
FULL = ["verl-reward-server", "verl-reward-bench", "verl-shm-bench", "verl-reward-score"]
# words of a --help text that are no flags ("'--flag value' or '--flag=value'")
HELP_WORDS = {"--flag", "--cuda-OPTION"}
TRAINER_SECTIONS = {"data", "actor_rollout_ref", "critic", "algorithm", "trainer"}
ROLES = {"actor", "critic", "rollout", "reference", "reward", "colocate"}
DEVMAP_ONLY = ROLES - {"critic", "reward"}
SKIP_YAML = {"reward_model", "custom_reward_function", "reward", "apiVersion", "kind"}
# a flag; `--cuda-*` (a family, named so in prose and tables) is no flag of its own
FLAG = re.compile(r"(?<![\w-])--[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9](?![\w*-])")
FAMILY = re.compile(r"(?<![\w-])(--[A-Za-z][A-Za-z0-9-]*-)\*")  # `--cuda-*`: group 1 is `--cuda-`
# dotted words of the docs that name verl's data structures or files, not config keys
NOT_KEYS = {"data.batch", "data.non_tensor_batch", "data.json"}
KEY = re.compile(r"^(data|actor_rollout_ref|critic|algorithm|trainer)(\.[a-z_][a-z0-9_]*)+$")


def flags_of(text):
    return {m.group(0) for m in FLAG.finditer(text)}


def help_flags(bin_dir, binary, sub=None):
    cmd = [os.path.join(bin_dir, binary)] + ([sub] if sub else []) + ["--help"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        sys.exit(f"check_docs: cannot run {' '.join(cmd)}: {e}")
    if p.returncode != 0:
        sys.exit(f"check_docs: {' '.join(cmd)} exited {p.returncode}")
    return flags_of(p.stdout + p.stderr)


def python_flags():
    """The flags of every tools/ and python/ script: its --help when it runs here (stdlib only),
    else its add_argument("--x") calls (a script that imports torch)."""
    out = {}
    for top in ("tools", "python"):
        for root, _, files in os.walk(os.path.join(SRC, top)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(root, f)
                text = open(path, encoding="utf-8").read()
                if "add_argument" not in text:
                    continue
                flags = set(re.findall(r"add_argument\(\s*(?:\"-\w\",\s*)?\"(--[\w-]+)\"", text))
                if "__main__" in text and not re.search(r"^\s*(import|from) (torch|transformers|numpy)", text, re.M):
                    try:
                        p = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True,
                                           timeout=20)
                        if p.returncode == 0:
                            flags |= flags_of(p.stdout)
                    except subprocess.TimeoutExpired:
                        pass
                out[f] = flags
    return out


def literal_flags(text):
    return set(re.findall(r"[\"' ](--[a-z][a-z0-9-]*[a-z0-9])[=\"' ]", text))


def source_flags():
    """Every "--flag" string literal of the sources: the flags of programs this build does not make
    (the CUDA benches), for flags the docs name outside a command line of a built binary."""
    out = set()
    for top in ("tools", "tests", "trainer", "model", "reward_server", "common", "shm", "client", "deploy"):
        for root, _, files in os.walk(os.path.join(SRC, top)):
            if os.path.relpath(root, SRC) == os.path.join("tests", "docs"):  # this check's own test
                continue
            for f in files:
                if f.endswith((".c", ".cu", ".h", ".cuh", ".sh", ".py", ".txt")) and f != "check_docs.py":
                    text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
                    out |= literal_flags(text)
    return out


def segments(text):
    """Command segments of one line: split at pipes, &&, ;, and a trailing # comment."""
    text = re.split(r"\s#\s", " " + text, maxsplit=1)[0]
    return re.split(r"\|(?![^`]*`)|&&|;", text)


def command_of(seg, pyflags):
    """(program key, flags) when the segment runs one of our binaries or tools/ scripts."""
    quoted = re.findall(r'"([^"]*)"', seg)
    seg = re.sub(r'"[^"]*"', " ", seg)
    toks = seg.replace("`", " ").split()
    for i, t in enumerate(toks):
        if "=" in t:  # VAR=value before the program, or a --flag=value
            continue
        base = os.path.basename(t)
        if base in BINARIES:
            sub = toks[i + 1] if i + 1 < len(toks) and toks[i + 1] in SUBCOMMANDS.get(base, []) else None
            fl = flags_of(" ".join(toks[i + 1:]))
            if base == "verl-reward-bench" and "--spawn-server" in fl:  # its value: the server's flags
                fl |= {("verl-reward-server", f) for q in quoted for f in flags_of(q)}
            return (base, sub), fl
        if base in SOURCE_PROGRAMS:
            return ("src", base), flags_of(" ".join(toks[i + 1:]))
        if base in pyflags:
            return ("py", base), flags_of(" ".join(toks[i + 1:]))
    return None, set()


def doc_lines(path):
    """(line number, text, in code block) with backslash continuations joined."""
    out, code, buf, start = [], False, "", 0
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.lstrip().startswith("```"):
            code = not code
            continue
        if not buf:
            start = n
        if code and line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append((start, buf + line, code))
        buf = ""
    return out


def yaml_blocks(path):
    blocks, cur, start = [], None, 0
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if cur is None and line.strip() == "```yaml":
            cur, start = [], n + 1
        elif cur is not None and line.strip() == "```":
            blocks.append((start, "".join(cur)))
            cur = None
        elif cur is not None:
            cur.append(line)
    return blocks


def top_keys(text):
    return [m.group(1) for m in re.finditer(r"^([A-Za-z_][\w-]*)\s*[:=]", text, re.M)]


def run_trainer(bin_dir, args, gpus=True):
    """verl-trainer ARGS --check, against one node of 8 GPUs unless gpus is False (ARGS has --topology)."""
    p = subprocess.run([os.path.join(bin_dir, "verl-trainer")] + args + ["--check"] + (["--gpus", "8"] if gpus else []),
                       capture_output=True, text=True, timeout=60, cwd=SRC)
    return p.returncode, p.stdout + p.stderr


def example_topologies():
    d = os.path.join(SRC, "docs", "examples")
    return [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.startswith("topology_") and f.endswith(".yaml")]


class Checker:
    def __init__(self, bin_dir, verbose):
        self.bin, self.verbose, self.problems = bin_dir, verbose, []
        self.n_flags = self.n_yaml = self.n_keys = 0  # what was checked, for -v
        self.help = {}
        for b in BINARIES:
            if not os.access(os.path.join(bin_dir, b), os.X_OK):
                sys.exit(f"check_docs: {bin_dir}/{b} is not built")
            self.help[(b, None)] = help_flags(bin_dir, b)
            for s in SUBCOMMANDS.get(b, []):
                self.help[(b, s)] = help_flags(bin_dir, b, s)
        self.py = python_flags()
        self.ours = set().union(*self.help.values(), *self.py.values())
        self.src = source_flags()
        self.table_flags = {b: set() for b in FULL}
        self.tmp = tempfile.mkdtemp(prefix="check_docs.")

    def bad(self, where, what):
        self.problems.append(f"{where}: {what}")

    def allowed(self, prog):
        if prog[0] == "py":
            return self.py[prog[1]]
        if prog[0] == "src":
            text = open(os.path.join(SRC, SOURCE_PROGRAMS[prog[1]]), encoding="utf-8").read()
            if not prog[1].endswith(".sh"):
                return literal_flags(text)
            # a script: the flags its text names, and those of the python scripts it hands "$@"
            return flags_of(text).union(*(self.py.get(f, set()) for f in re.findall(r"(\w+\.py)\b", text)))
        return self.help[prog] | ({"--help", "--version"} if prog[1] else set())

    def flags(self, rel):
        heading, table = "", None  # table: the header's first cell of the table being read
        for n, text, code in doc_lines(os.path.join(SRC, rel)):
            if code or not text.startswith("|"):
                table = None
            elif table is None:
                table = text.split("|")[1].strip()
            if not code and text.startswith("#"):
                heading = text.lstrip("#").strip()
                continue
            where = f"{rel}:{n}"
            claimed = set()
            # command lines: a code-block line, or each inline code span of prose
            pieces = [text] if code else re.findall(r"`([^`]+)`", text)
            for piece in pieces:
                for seg in segments(piece):
                    prog, fl = command_of(seg, self.py)
                    if not prog:
                        continue
                    ok = self.allowed(prog)
                    name = prog[1] if prog[0] in ("py", "src") else " ".join(p for p in prog if p)
                    for f in sorted(fl, key=str):
                        self.n_flags += 1
                        p, f = f if isinstance(f, tuple) else (name, f)
                        claimed.add(f)
                        if f not in (self.help[(p, None)] if isinstance(p, str) and p in BINARIES else ok):
                            self.bad(where, f"{p} has no flag {f} (not in its --help)")
            if table == "flag" and text.startswith("| `--"):
                b = TABLES.get(heading)
                if not b:
                    self.bad(where, f"a flag table under '{heading}', a heading tools/check_docs.py does not map")
                    continue
                first = re.split(r"(?<!\\)\|", text)[1]
                if b in self.table_flags:  # what the row names anywhere (`--server-bin` in a meaning)
                    self.table_flags[b] |= {m + "*" for m in FAMILY.findall(first)} | flags_of(text)
                for f in sorted(flags_of(first)):
                    claimed.add(f)
                    if f not in self.help[(b, None)]:
                        self.bad(where, f"{b} has no flag {f} (table under '{heading}')")
                    if b in self.table_flags:
                        self.table_flags[b].add(f)
            for f in sorted(flags_of(text) - claimed):
                if f not in self.ours and f not in EXTERNAL and f not in self.src:
                    self.bad(where, f"no program of ours has a flag {f}")

    def mentioned(self, docs):
        """Every flag of every --help (subcommands too) is named somewhere in the docs."""
        text = "".join(open(os.path.join(SRC, rel), encoding="utf-8").read() for rel in docs)
        named = flags_of(text)
        for (b, sub), fl in sorted(self.help.items(), key=str):
            missing = sorted(f for f in fl - named - {"--help", "--version"} - HELP_WORDS
                             if not any(f.startswith(p[:-1]) for p in FAMILY.findall(text)))
            if missing:
                self.bad("docs", f"{b}{' ' + sub if sub else ''} flags no doc names: {', '.join(missing)}")

    def full_tables(self):
        for b in FULL:
            families = [f[:-1] for f in self.table_flags[b] if f.endswith("*")]
            # --help and --version: "Every binary's command line"; a placeholder of the help text
            missing = sorted(f for f in self.help[(b, None)] - self.table_flags[b] - {"--help", "--version"}
                             if not any(f.startswith(p) for p in families) and f not in HELP_WORDS)
            if missing:
                self.bad("docs/operations.md", f"{b} flags missing from its flag table: {', '.join(missing)}")

    def yaml(self, rel, start, text):
        keys = set(top_keys(text))
        where = f"{rel}:{start}"
        if keys & SKIP_YAML and not keys & (TRAINER_SECTIONS | DEVMAP_ONLY):  # a device map has reward: too
            return
        self.n_yaml += 1
        path = os.path.join(self.tmp, f"block_{start}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        if keys & TRAINER_SECTIONS and not keys & DEVMAP_ONLY:
            rc, out = run_trainer(self.bin, ["--config", path, "--device-map", "docs/examples/device_map_8gpu.yaml"])
            self.unknown_keys(where, out)
        elif keys & DEVMAP_ONLY:
            rc, out = run_trainer(self.bin, ["--device-map", path])
            if rc != 0 and re.search(r"\bnode[1-9]\d*:", text):  # several nodes: a planned topology of ours
                for topo in example_topologies():
                    rc, out = run_trainer(self.bin, ["--device-map", path, "--topology", topo], gpus=False)
                    if rc == 0:
                        break
            if rc != 0:
                self.bad(where, "verl-trainer --check refuses this device map: " + out.strip().replace("\n", " | "))
        elif keys == {"nodes"}:  # a --topology file: checked with a cpu map (no GPU ids to fit)
            rc, out = run_trainer(self.bin, ["--device-map", "docs/examples/device_map_cpu.yaml", "--topology", path],
                                  gpus=False)
            if rc != 0:
                self.bad(where, "verl-trainer --check --topology refuses this file: " + out.strip().replace("\n", " | "))
        else:
            for k in sorted(keys):
                if "--" + k.replace("_", "-") not in self.help[("verl-reward-server", None)] and \
                        "--" + k not in self.help[("verl-reward-server", None)]:
                    self.bad(where, f"config-file key '{k}' is not a verl-reward-server flag")

    def unknown_keys(self, where, out):
        for line in out.splitlines():
            if "unknown key" in line or "is not a key" in line:
                self.bad(where, line.strip())

    def dotted_keys(self, rel):
        seen = set()
        for n, line in enumerate(open(os.path.join(SRC, rel), encoding="utf-8"), 1):
            for span in re.findall(r"`([^`]+)`", line):
                m = re.fullmatch(r"\.\.\.([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)", span.strip())
                if m:  # `...actor.ppo_epochs`: the tail of some key
                    self.n_keys += 1
                    leaves = self.trainer_keys()[0]
                    if not any(("." + k).endswith("." + m.group(1)) for k in leaves):
                        self.bad(f"{rel}:{n}", f"no trainer config key ends in {m.group(1)}")
                    continue
                for word in re.split(r"[\s=,:()]+", span):
                    if KEY.match(word) and word not in seen and word not in NOT_KEYS:
                        seen.add(word)
                        self.key(f"{rel}:{n}", word)

    def key(self, where, dotted):
        self.n_keys += 1
        parts = dotted.split(".")
        text = "".join("  " * i + p + ":" + ("\n" if i < len(parts) - 1 else " 1\n") for i, p in enumerate(parts))
        path = os.path.join(self.tmp, "key.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        rc, out = run_trainer(self.bin, ["--config", path, "--device-map", "docs/examples/device_map_8gpu.yaml"])
        for line in out.splitlines():
            if "unknown key" in line:
                self.bad(where, f"{dotted}: verl-trainer says {line.split('error: ', 1)[-1].strip()}")

    def trainer_keys(self):
        """The trainer's config keys, as it names them: a probe key in a mapping is refused with
        "HINT: the keys are ..." (or "(keys: ...)"); a key whose probe is refused so is a mapping.
        Returns (leaves, unused): unused are verl's keys the trainer accepts and ignores."""
        if getattr(self, "_keys", None):
            return self._keys
        leaves, unused, todo = [], set(), sorted(TRAINER_SECTIONS)
        path = os.path.join(self.tmp, "probe.yaml")
        while todo:
            dotted = todo.pop(0)
            parts = dotted.split(".") + ["zz_probe"]
            with open(path, "w", encoding="utf-8") as f:
                f.write("".join("  " * i + p + ":" + ("\n" if i < len(parts) - 1 else " 1\n")
                                for i, p in enumerate(parts)))
            rc, out = run_trainer(self.bin, ["--config", path, "--device-map", "docs/examples/device_map_8gpu.yaml"])
            m = re.search(r"unknown key 'zz_probe' in (\S+)\. HINT: (?:the keys? (?:are|is) (.*)|did you mean .*\(keys: (.*)\))$",
                          out, re.M)
            if not m:
                leaves.append(dotted)
                continue
            for k in (m.group(2) or m.group(3)).split(", "):
                todo.append(dotted + "." + k)
        for dotted in leaves:  # accepted but not used: the trainer says so
            parts = dotted.split(".")
            with open(path, "w", encoding="utf-8") as f:
                f.write("".join("  " * i + p + ":" + ("\n" if i < len(parts) - 1 else " x\n")
                                for i, p in enumerate(parts)))
            rc, out = run_trainer(self.bin, ["--config", path, "--device-map", "docs/examples/device_map_8gpu.yaml"])
            if re.search(r"not used by this build: .*\b" + re.escape(dotted) + r"\b", out):
                unused.add(dotted)
        self._keys = (leaves, unused)
        return self._keys

    def documented_keys(self, docs):
        """Does a docs line name the key: its path or a dotted tail of 2+ segments (`...rollout.top_k`,
        `optim.lr`), or its bare name on a line that names a sibling (`...actor.clip_ratio` / `clip_ratio_c`)."""
        lines = []  # per paragraph (a table row is one): its code spans, as segment lists
        for rel in docs:
            para = []
            for line in open(os.path.join(SRC, rel), encoding="utf-8"):
                if not line.strip() or line.startswith("|"):
                    lines.append(para)
                    para = []
                # `trainer:` names the mapping: its bare keys in the same paragraph are its own
                spans = [w.strip().lstrip(".").replace(":", ".x") if w.strip().endswith(":") and " " not in w.strip()
                         else w.strip().lstrip(".")
                         for sp in re.findall(r"`([^`]+)`", line) for w in sp.split(" / ")]
                para += [w.split(".") for w in spans if re.fullmatch(r"[a-z_][a-z0-9_.]*", w)]
                if line.startswith("|"):
                    lines.append(para)
                    para = []
            lines.append(para)
        leaves, unused = self.trainer_keys()
        missing = []
        for dotted in leaves:
            if dotted in unused:
                continue
            p = dotted.split(".")
            ok = False
            for spans in lines:
                for w in spans:
                    if len(w) >= 2 and p[-len(w):] == w:
                        ok = True
                    elif len(w) >= 2 and p[-2:-1] == w[-2:-1]:  # a sibling: the bare name in the paragraph
                        ok = ok or [p[-1]] in spans
                if ok:
                    break
            if not ok:
                missing.append(dotted)
        if missing:
            self.bad("docs", "trainer config keys no doc names: " + ", ".join(missing))
        if self.verbose:
            print(f"check_docs: {len(leaves)} trainer keys ({len(unused)} verl keys accepted, not used)",
                  file=sys.stderr)

    def run(self, docs):
        for rel in docs:
            self.flags(rel)
            for start, text in yaml_blocks(os.path.join(SRC, rel)):
                self.yaml(rel, start, text)
            self.dotted_keys(rel)
        if set(docs) >= {"docs/operations.md"}:
            self.full_tables()
            self.mentioned(docs)
            self.documented_keys(docs)
        for f in sorted(os.listdir(os.path.join(SRC, "docs/examples"))):
            if f.endswith(".yaml"):
                rel = "docs/examples/" + f
                self.yaml(rel, 1, open(os.path.join(SRC, rel), encoding="utf-8").read())
        if self.verbose:
            print(f"check_docs: {self.n_flags} flags of command lines, {self.n_yaml} YAML files or blocks, "
                  f"{self.n_keys} dotted config keys checked", file=sys.stderr)
        return self.problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(SRC, "build/bin"), help="the built binaries")
    ap.add_argument("--docs", nargs="*", default=DOCS, help="files relative to the source tree")
    ap.add_argument("-v", action="store_true", help="print what was checked")
    a = ap.parse_args()
    c = Checker(os.path.abspath(a.bin), a.v)
    problems = c.run(a.docs)
    for p in problems:
        print(p)
    if a.v or problems:
        print(f"check_docs: {len(problems)} problem(s) in {', '.join(a.docs)}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
