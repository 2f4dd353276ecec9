"""cli_util.py: helpers of the verl-trainer command tests (test_train_cli.py, test_generate_cli.py)."""
import json
import os
import shutil
import subprocess
import sys

_PROBE = ("import resource, subprocess, sys\n"
          "p = subprocess.run(sys.argv[1:], input=sys.stdin.read(), capture_output=True, text=True)\n"
          "sys.stderr.write(p.stderr)\n"
          "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
          "sys.stdout.write(p.stdout)\n")


def peak_rss(args, stdin="", timeout=120):
    """(exit status, peak RSS in KiB, stdout, stderr) of args fed stdin. Python's RUSAGE_CHILDREN
    is the maximum over every child a process has waited for, so args run under a fresh Python."""
    p = subprocess.run([sys.executable, "-c", _PROBE] + list(args), input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    head, _, out = p.stdout.partition("\n")
    rc, kib = (int(x) for x in head.split())
    return rc, kib, out, p.stderr


def model_copy(src, dst, **config):
    """Copies the model directory src (config.json, model.safetensors, generation_config.json) to
    dst (created), with the given config.json keys replaced."""
    os.makedirs(dst, exist_ok=True)
    for f in ("model.safetensors", "generation_config.json"):
        shutil.copy(os.path.join(src, f), dst)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(config)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f)
