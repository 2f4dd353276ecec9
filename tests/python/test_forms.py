"""Input-form equivalence (issue 23): the same sequences give the same scores through every
entry point, in every form it accepts.

    HTTP POST /v1/score   JSON {"input_ids": [ids]} (one) and {"input_ids": [[ids], ...]},
                          msgpack the same two forms
    shm                   the C client (vr_test_shm_client) and RewardClient
    Python                RewardClient.score / HttpRewardClient.score: a flat list (one
                          sequence -> a list of one score), a list of lists, numpy 1-D / 2-D,
                          HttpRewardClient given "host:port" without a scheme
    verl-reward-score     {"input_ids": [ids]}, [ids], {"input_ids": [[ids], ...]}, [[ids], ...]

The cpu backend promises the same float32 bits whatever the batch (docs/protocol.md), so
every comparison is exact, on the checksum scorer and on the llama_gqa fixture.
"""
import json
import os
import subprocess
import unittest
import urllib.request

import vr_testlib
try:
    import numpy as np
except ImportError:  # tools/deps.sh installs Debian's python3-numpy; another interpreter may lack it
    np = None
from vr_testlib import FIXTURE_MODEL, SCORE_TOOL, TESTS_BIN, Server, f32
from verl_reward import HttpRewardClient, RewardClient, msgpack

SHM_CLIENT = os.path.join(TESTS_BIN, "vr_test_shm_client")

# lengths 1..40 (the fixture's max_seq_len is 48), ids inside its vocabulary (97)
SEQS = [[(i * 31 + j * 7 + 3) % 97 for j in range(1 + (i * 11) % 40)] for i in range(9)]


def post(url, body, ctype):
    req = urllib.request.Request(url + "/v1/score", data=body, method="POST", headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read()


def unpack_scores(raw):
    """The msgpack answer: a map with "scores" (float32 array) and timings."""
    doc = msgpack.unpackb(raw)
    return [f32(x) for x in doc["scores"]]


def score_tool_lines(model, lines):
    r = subprocess.run([SCORE_TOOL, "--model", model], input="".join(l + "\n" for l in lines).encode(),
                       capture_output=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError("verl-reward-score failed (%d): %s" % (r.returncode, r.stderr.decode()[-2000:]))
    return [json.loads(l) for l in r.stdout.decode().splitlines() if l.strip()]


class FormsTest(unittest.TestCase):
    def check_model(self, model):
        srv = Server(model=model, tag="forms")
        self.addCleanup(srv.stop)
        got = {}  # form -> list of float32 scores, one per SEQS entry
        # HTTP JSON: one request per sequence in the flat form, one batch in the nested form
        one = []
        for s in SEQS:
            out = json.loads(post(srv.url, json.dumps({"input_ids": s}).encode(), "application/json"))
            self.assertEqual(len(out["scores"]), 1, "the flat form answers a list of one score")
            one.append(f32(out["scores"][0]))
        got["http json flat"] = one
        out = json.loads(post(srv.url, json.dumps({"input_ids": SEQS}).encode(), "application/json"))
        got["http json nested"] = [f32(x) for x in out["scores"]]
        got["http msgpack flat"] = [unpack_scores(post(srv.url, msgpack.packb({"input_ids": s}),
                                                       "application/msgpack"))[0] for s in SEQS]
        got["http msgpack nested"] = unpack_scores(post(srv.url, msgpack.packb({"input_ids": SEQS}),
                                                        "application/msgpack"))
        # shm: the C client (packed ids, nested body) and the Python clients
        p = subprocess.run([SHM_CLIENT, "score", srv.shm_name], input=json.dumps({"input_ids": SEQS}),
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        got["shm C client"] = [f32(x) for x in json.loads(p.stdout)["scores"]]
        port = srv.url.rsplit(":", 1)[1]
        with RewardClient(srv.shm_name) as rc, HttpRewardClient("127.0.0.1:%s" % port) as hc:
            for name, c in (("RewardClient", rc), ("HttpRewardClient", hc)):
                flat = []
                for s in SEQS:
                    r = c.score(s)
                    self.assertEqual(len(r), 1, "%s.score(flat list) -> a list of one score" % name)
                    flat.append(f32(r[0]))
                got[name + " flat"] = flat
                got[name + " nested"] = [f32(x) for x in c.score(SEQS)]
                if np is None:
                    continue
                got[name + " numpy 1-D"] = [f32(c.score(np.array(s, dtype=np.int64))[0]) for s in SEQS]
                got[name + " numpy rows"] = [f32(x) for x in c.score([np.array(s, dtype=np.int32) for s in SEQS])]
                same = [s for s in SEQS if len(s) == len(SEQS[0])]  # a 2-D array needs equal lengths
                got[name + " numpy 2-D"] = [f32(x) for x in c.score(np.array(same))] + \
                    got[name + " flat"][len(same):]
                self.assertEqual(len(same), 1 + sum(1 for s in SEQS[1:] if len(s) == len(SEQS[0])))
        # verl-reward-score (a model directory only: it has no checksum scorer): each line form
        if model != "checksum":
            self.score_tool_forms(model, got)
        if np is None:
            print("numpy not importable by this interpreter: its forms not checked (HINT: apt-get install python3-numpy)")
        self.assertEqual(len(got), 9 + (6 if np is not None else 0) + (3 if model != "checksum" else 0))
        want = got["http json nested"]
        self.assertEqual(len(want), len(SEQS))
        self.assertEqual(len(set(want)), len(want), "distinct sequences, distinct scores")
        if model == "checksum":
            self.assertEqual(want, [vr_testlib.checksum_score(s) for s in SEQS])
        for form, scores in got.items():
            self.assertEqual(scores, want, form)
        print("%s: %d forms agree" % (model, len(got)))

    def score_tool_forms(self, model, got):
        lines = score_tool_lines(model, [json.dumps({"input_ids": s}) for s in SEQS])
        got["score tool {input_ids: ids}"] = [f32(l["score"]) for l in lines]
        lines = score_tool_lines(model, [json.dumps(s) for s in SEQS])
        got["score tool bare ids"] = [f32(l["score"]) for l in lines]
        lines = score_tool_lines(model, [json.dumps({"input_ids": SEQS[:4]}), json.dumps(SEQS[4:])])
        self.assertEqual(len(lines), 2, "one output line per input line")
        got["score tool batch lines"] = [f32(x) for l in lines for x in l["scores"]]

    def test_checksum(self):
        self.check_model("checksum")

    def test_fixture_model(self):
        self.check_model(FIXTURE_MODEL)


if __name__ == "__main__":
    unittest.main()
