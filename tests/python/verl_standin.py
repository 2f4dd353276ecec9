"""A minimal stand-in of verl's batch structure (verl itself is not installable here).

Faithful to what verl's reward managers and RewardModelWorker read from a
DataProto (verl/protocol.py):
  data.batch: a TensorDict; keys() and ["name"] give (bs, ...) tensors:
    prompts (bs, prompt_len) left-padded, responses (bs, response_len)
    right-padded, input_ids = cat(prompts, responses) (bs, prompt_len +
    response_len), attention_mask (same shape, 1 on real tokens), position_ids
    = clip(cumsum(attention_mask) - 1, 0) (verl's compute_position_id_with_mask);
    batch.batch_size[0] is bs.
  data.non_tensor_batch: dict of per-sample arrays (numpy object arrays in
    verl; lists here): data_source, reward_model ({"ground_truth": ...}),
    extra_info.
  len(data) is bs.
Tensors are ListTensor (nested lists with .shape / .tolist() / .dim()) or, when
torch is importable, real torch tensors built from the same lists.
"""


class ListTensor:
    """The few tensor features the adapter may touch, over nested lists."""

    def __init__(self, rows):
        self.rows = [list(r) for r in rows]

    @property
    def shape(self):
        return (len(self.rows), len(self.rows[0]) if self.rows else 0)

    @property
    def ndim(self):
        return 2

    def dim(self):
        return 2

    def tolist(self):
        return [list(r) for r in self.rows]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


class TensorDictStandIn(dict):
    def __init__(self, tensors, bs):
        super().__init__(tensors)
        self.batch_size = (bs,)


class DataProtoStandIn:
    def __init__(self, batch, non_tensor_batch=None, meta_info=None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch or {}
        self.meta_info = meta_info or {}

    def __len__(self):
        return self.batch.batch_size[0]


def make_batch(prompts, responses, prompt_len, response_len, pad_id=0, prompt_side="left",
               response_side="right", tensor=ListTensor, non_tensor_batch=None, with_position_ids=True):
    """Lays out token lists the way verl does (prompt_side / response_side pick where
    the padding goes) and returns a DataProtoStandIn."""
    p_rows, r_rows, m_rows = [], [], []
    for p, r in zip(prompts, responses):
        assert len(p) <= prompt_len and len(r) <= response_len
        pp = [pad_id] * (prompt_len - len(p))
        rp = [pad_id] * (response_len - len(r))
        pm, rm = [0] * len(pp), [0] * len(rp)
        if prompt_side == "left":
            prow, pmask = pp + list(p), pm + [1] * len(p)
        else:
            prow, pmask = list(p) + pp, [1] * len(p) + pm
        if response_side == "right":
            rrow, rmask = list(r) + rp, [1] * len(r) + rm
        else:
            rrow, rmask = rp + list(r), rm + [1] * len(r)
        p_rows.append(prow)
        r_rows.append(rrow)
        m_rows.append(pmask + rmask)
    ids = [a + b for a, b in zip(p_rows, r_rows)]
    pos = []
    for m in m_rows:
        acc, row = 0, []
        for x in m:
            acc += x
            row.append(max(acc - 1, 0))
        pos.append(row)
    t = {"prompts": tensor(p_rows), "responses": tensor(r_rows), "input_ids": tensor(ids),
         "attention_mask": tensor(m_rows)}
    if with_position_ids:
        t["position_ids"] = tensor(pos)
    return DataProtoStandIn(TensorDictStandIn(t, len(prompts)), non_tensor_batch)
