"""verl adapter without a server: which tokens are sent and where each score lands
(left- and right-padded layouts), on the verl stand-in (lists) and, when torch is
importable, on real torch tensors compared with verl's own formula."""

import unittest

from verl_reward import InvalidRequest, ScoreResult, verl_adapter
from verl_standin import ListTensor, make_batch

try:
    import torch
except ImportError:            # the list stand-in still runs every placement test
    torch = None


class FakeClient:
    """Scores a sequence as sum(ids) + 1000 * len(ids): distinct per sequence, and a
    wrong token set or order shows up as a wrong value. Records what it got."""

    def __init__(self):
        self.calls = []

    @staticmethod
    def value(seq):
        return float(sum(seq) + 1000 * len(seq))

    def score_with_info(self, seqs, extras=None):
        seqs = [list(s) for s in seqs]
        self.calls.append((seqs, extras))
        vals = [self.value(s) for s in seqs]
        return ScoreResult(vals, {"model": vals, "rule": [0.0] * len(vals)}, 1, 2)


PROMPTS = [[11, 12, 13], [21], [31, 32, 33, 34], [41, 42]]
RESPONSES = [[51, 52], [61, 62, 63, 64, 65], [71], [81, 82, 83]]
PROMPT_LEN, RESPONSE_LEN = 4, 5


def last_valid(mask_row):
    """Reference: index of the last 1 in the row (plain loop, independent of the adapter)."""
    return max(i for i, m in enumerate(mask_row) if m)


class PlacementTest(unittest.TestCase):
    def check(self, prompt_side, response_side, tensor=ListTensor, with_position_ids=True):
        data = make_batch(PROMPTS, RESPONSES, PROMPT_LEN, RESPONSE_LEN, pad_id=0,
                          prompt_side=prompt_side, response_side=response_side, tensor=tensor,
                          with_position_ids=with_position_ids)
        fake = FakeClient()
        mgr = verl_adapter.VerlRewardManager(client=fake, send_extras=False)
        out = mgr(data)
        rows = out.tolist() if hasattr(out, "tolist") else out
        # what was sent: exactly the valid tokens, prompt then response, per sample
        sent, extras = fake.calls[0]
        self.assertEqual(sent, [p + r for p, r in zip(PROMPTS, RESPONSES)])
        self.assertIsNone(extras)
        mask = data.batch["attention_mask"].tolist()
        self.assertEqual(len(rows), len(PROMPTS))
        for i, row in enumerate(rows):
            self.assertEqual(len(row), RESPONSE_LEN)
            j = last_valid(mask[i]) - PROMPT_LEN
            want = [0.0] * RESPONSE_LEN
            want[j] = FakeClient.value(PROMPTS[i] + RESPONSES[i])
            self.assertEqual(row, want, "row %d (%s prompt, %s response)" % (i, prompt_side, response_side))
        return rows

    def test_verl_layout_left_prompt_right_response(self):
        rows = self.check("left", "right")
        # verl's layout: the score sits at valid_response_length - 1
        for i, r in enumerate(RESPONSES):
            self.assertNotEqual(rows[i][len(r) - 1], 0.0)

    def test_right_padded_everything(self):
        self.check("right", "right")

    def test_left_padded_responses(self):
        rows = self.check("left", "left")
        for row in rows:
            self.assertNotEqual(row[-1], 0.0)   # last column is always the last valid token

    def test_without_position_ids(self):
        self.check("left", "right", with_position_ids=False)
        self.check("right", "left", with_position_ids=False)

    def test_input_ids_rebuilt_from_prompts_and_responses(self):
        data = make_batch(PROMPTS, RESPONSES, PROMPT_LEN, RESPONSE_LEN)
        del data.batch["input_ids"]
        fake = FakeClient()
        verl_adapter.VerlRewardManager(client=fake, send_extras=False)(data)
        self.assertEqual(fake.calls[0][0], [p + r for p, r in zip(PROMPTS, RESPONSES)])

    def test_empty_response_gets_no_reward(self):
        # verl slices the last response_len columns: a score whose last valid token is in
        # the prompt is dropped (the same happens in verl's RewardModelWorker).
        data = make_batch([[5, 6]], [[]], 3, 2)
        out = verl_adapter.VerlRewardManager(client=FakeClient(), send_extras=False)(data)
        self.assertEqual(out, [[0.0, 0.0]])

    def test_return_dict_and_extras(self):
        ntb = {"data_source": ["openai/gsm8k"] * 4,
               "reward_model": [{"ground_truth": str(i)} for i in range(4)],
               "extra_info": [{"index": i} for i in range(4)]}
        data = make_batch(PROMPTS, RESPONSES, PROMPT_LEN, RESPONSE_LEN, non_tensor_batch=ntb)

        class Tok:
            def decode(self, ids, skip_special_tokens=True):
                return " ".join(str(t) for t in ids)

        fake = FakeClient()
        res = verl_adapter.VerlRewardManager(tokenizer=Tok(), client=fake)(data, return_dict=True)
        self.assertEqual(set(res), {"reward_tensor", "reward_extra_info"})
        self.assertEqual(res["reward_extra_info"]["model"],
                         [FakeClient.value(p + r) for p, r in zip(PROMPTS, RESPONSES)])
        extras = fake.calls[0][1]
        self.assertEqual(extras[1], {"data_source": "openai/gsm8k", "ground_truth": "1",
                                     "extra_info": {"index": 1}, "solution_str": "61 62 63 64 65"})

    def test_rm_scores_pass_through(self):
        data = make_batch(PROMPTS, RESPONSES, PROMPT_LEN, RESPONSE_LEN)
        data.batch["rm_scores"] = "precomputed"
        fake = FakeClient()
        self.assertEqual(verl_adapter.VerlRewardManager(client=fake)(data), "precomputed")
        self.assertEqual(fake.calls, [])

    def test_single_token_quirk_matches_verl(self):
        # argmax(position_ids * mask) is 0 everywhere for a 1-token sequence, so verl
        # (and we) put its score in column 0 of the full sequence: here in the prompt part.
        idx = verl_adapter.last_token_index([[0, 0, 1, 0]])
        self.assertEqual(idx, [0])
        self.assertEqual(verl_adapter.last_token_index([[0, 1, 1, 0]]), [2])


@unittest.skipIf(torch is None, "torch not importable: the list stand-in covers placement")
class TorchPlacementTest(unittest.TestCase):
    @staticmethod
    def verl_expand(attention_mask, position_ids, response_length, scores):
        """verl's RewardModelWorker._expand_to_token_level, restated with torch."""
        bs = attention_mask.shape[0]
        eos_mask_idx = torch.argmax(position_ids * attention_mask, dim=-1)
        token_level = torch.zeros_like(attention_mask, dtype=scores.dtype)
        token_level[torch.arange(bs), eos_mask_idx] = scores
        return token_level[:, -response_length:]

    def test_torch_matches_verl_and_lists(self):
        for ps, rs in (("left", "right"), ("right", "right"), ("left", "left"), ("right", "left")):
            with self.subTest(prompt=ps, response=rs):
                tdata = make_batch(PROMPTS, RESPONSES, PROMPT_LEN, RESPONSE_LEN, prompt_side=ps,
                                   response_side=rs, tensor=lambda rows: torch.tensor(rows, dtype=torch.long))
                ldata = make_batch(PROMPTS, RESPONSES, PROMPT_LEN, RESPONSE_LEN, prompt_side=ps,
                                   response_side=rs)
                fake = FakeClient()
                out = verl_adapter.VerlRewardManager(client=fake, send_extras=True)(tdata)
                self.assertIsInstance(out, torch.Tensor)
                self.assertEqual(out.dtype, torch.float32)
                self.assertEqual(tuple(out.shape), (len(PROMPTS), RESPONSE_LEN))
                scores = torch.tensor([FakeClient.value(p + r) for p, r in zip(PROMPTS, RESPONSES)])
                ref = self.verl_expand(tdata.batch["attention_mask"], tdata.batch["position_ids"],
                                       RESPONSE_LEN, scores)
                self.assertTrue(torch.equal(out, ref))
                lout = verl_adapter.VerlRewardManager(client=FakeClient(), send_extras=False)(ldata)
                self.assertEqual(out.tolist(), lout)
                self.assertEqual(fake.calls[0][0], [p + r for p, r in zip(PROMPTS, RESPONSES)])

    def test_score_accepts_tensors(self):
        from verl_reward import _batch
        ids, cu = _batch.pack_sequences(torch.tensor([[1, 2], [3, 4]]))
        self.assertEqual((ids.tolist(), cu.tolist()), ([1, 2, 3, 4], [0, 2, 4]))
        ids, cu = _batch.pack_sequences([torch.tensor([5, 6, 7]), torch.tensor([8])])
        self.assertEqual((ids.tolist(), cu.tolist()), ([5, 6, 7, 8], [0, 3, 4]))
        import numpy
        ids, cu = _batch.pack_sequences([numpy.array([9, 10], dtype=numpy.int64)])
        self.assertEqual((ids.tolist(), cu.tolist()), ([9, 10], [0, 2]))


class ComputeScoreTest(unittest.TestCase):
    """compute_score (batch reward function): where token ids come from and what
    extras are sent; the transport is replaced by a recorder here (the server suite
    runs it against a real server)."""

    def setUp(self):
        self.sent = []
        self.orig = verl_adapter.score_sequences

        def record(seqs, extras, shm_name, service_url, timeout_s, connect_timeout_s, with_info=False):
            self.sent.append((seqs, extras, shm_name, service_url))
            return [FakeClient.value(s) for s in seqs]

        verl_adapter.score_sequences = record

    def tearDown(self):
        verl_adapter.score_sequences = self.orig

    def test_ids_from_extra_info(self):
        infos = [{"input_ids": [1, 2, 3], "index": 0},
                 {"prompt_ids": [4], "response_ids": [5, 6], "index": 1},
                 {"response_ids": [7]}]
        out = verl_adapter.compute_score(["a", "b", "c"], ["s0", "s1", "s2"], ["g0", 1, None], infos,
                                         shm_name="my_shm")
        self.assertEqual(out, [FakeClient.value([1, 2, 3]), FakeClient.value([4, 5, 6]), FakeClient.value([7])])
        seqs, extras, shm, url = self.sent[0]
        self.assertEqual(seqs, [[1, 2, 3], [4, 5, 6], [7]])
        self.assertEqual((shm, url), ("my_shm", None))
        self.assertEqual(extras[0], {"data_source": "a", "solution_str": "s0", "ground_truth": "g0",
                                     "extra_info": {"index": 0}})
        self.assertEqual(extras[1]["ground_truth"], 1)
        self.assertEqual(extras[2]["extra_info"], {})

    def test_tokenizer_and_missing_ids(self):
        class Tok:
            def encode(self, text):
                return [ord(c) for c in text]

        out = verl_adapter.compute_score(["a"], ["xy"], ["g"], [{"prompt": "P"}], tokenizer=Tok(),
                                         service_url="http://h:1", send_extras=False)
        self.assertEqual(self.sent[0][0], [[ord("P"), ord("x"), ord("y")]])
        self.assertIsNone(self.sent[0][1])
        self.assertEqual(self.sent[0][3], "http://h:1")
        self.assertEqual(len(out), 1)
        with self.assertRaises(InvalidRequest) as cm:
            verl_adapter.compute_score(["a", "b"], ["s", "t"], ["g", "h"], [{"input_ids": [1]}, {}])
        self.assertEqual(cm.exception.bad_seq, 1)
        self.assertIn("extra_info", cm.exception.message)

    def test_rm_tokenizer_dir(self):
        """reward_kwargs.rm_tokenizer_dir: the project's own tokenizer encodes prompt + solution
        (verl_reward.text; equal to verl-tokenize's ids, checked in tests/client_text)."""
        import os
        import vr_testlib
        from verl_reward import text
        d = os.path.join(vr_testlib.SOURCE_DIR, "tests", "fixtures", "server_tokenizer")
        verl_adapter.compute_score(["a"], [" sat in a hat"], ["g"], [{"prompt": "the cat"}], rm_tokenizer_dir=d,
                                   service_url="http://h:1", send_extras=False)
        want = text.load(d).encode("the cat sat in a hat")
        self.assertEqual(want[0], 1)                  # BOS: encode with add_special_tokens, as HF's
        self.assertEqual(self.sent[0][0], [want])

    def test_loaded_by_file_path_like_verl(self):
        # verl's get_custom_reward_fn: spec_from_file_location("custom_module", path), then
        # getattr(module, name)(*args, **kwargs, **reward_kwargs).
        import importlib.util
        import verl_reward.verl_custom_reward as shim
        spec = importlib.util.spec_from_file_location("custom_module", shim.__file__)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, "compute_score")
        reward_kwargs = {"shm_name": "from_yaml", "timeout_s": 5}
        out = fn(data_sources=["d"], solution_strs=["s"], ground_truths=["g"],
                 extra_infos=[{"input_ids": [3, 4]}], **reward_kwargs)
        self.assertEqual(out, [FakeClient.value([3, 4])])
        self.assertEqual(self.sent[0][2], "from_yaml")

    def test_non_scalar_ground_truth_is_sent_as_text(self):
        verl_adapter.compute_score(["a"], ["s"], [["x", "y"]], [{"input_ids": [1]}])
        self.assertEqual(self.sent[0][1][0]["ground_truth"], str(["x", "y"]))


if __name__ == "__main__":
    unittest.main()
