"""verl integration: get rewards from verl-reward-server inside a verl PPO/GRPO run.

Two entry points (docs/operations.md, "Python and verl", has the YAML):

1. compute_score(data_sources, solution_strs, ground_truths, extra_infos, **reward_kwargs)
   A batch function for verl's `custom_reward_function` with
   `reward_model.reward_manager: batch`. verl's BatchRewardManager hands it
   decoded strings only, so the token ids travel in each sample's extra_info
   ("input_ids", or "prompt_ids" + "response_ids"), or reward_kwargs names a
   tokenizer that re-encodes prompt + solution. reward_kwargs: shm_name or
   service_url, timeout_s, connect_timeout_s, tokenizer, send_extras.

2. VerlRewardManager: a reward manager with verl's constructor signature
   (tokenizer, num_examine, compute_score, reward_fn_key, **reward_kwargs) that
   reads the token tensors of verl's batch (input_ids, attention_mask, prompts,
   responses, optional position_ids), scores each sequence's valid tokens, and
   returns the token-level reward tensor (bs, response_len) with the score at
   the last valid token, computed the way verl's RewardModelWorker does
   (_expand_to_token_level: argmax(position_ids * attention_mask), then the
   last response_len columns).

Works with torch tensors (verl's DataProto), numpy arrays, or plain nested
lists (the tests use a minimal stand-in of DataProto built from lists).
"""

import os
import threading

from ._batch import _as_numpy, _np, pack_padded
from .client import RewardClient
from .errors import STATUS_VALUES, InvalidRequest, ServerGone
from .http import HttpRewardClient

DEFAULT_SHM_NAME = "verl_reward_shm"
_INVAL = STATUS_VALUES["VR_ERR_INVAL"]
_ID_KEYS = ("input_ids", "prompt_ids", "response_ids")

# ---------------------------------------------------------------------------
# connections: one client per (transport, address, process), reused across steps
_clients = {}
_clients_lock = threading.Lock()


def get_client(shm_name=None, service_url=None, timeout_s=60.0, connect_timeout_s=30.0):
    """A cached RewardClient (shm) or HttpRewardClient (service_url) for this process.

    Default address: reward_kwargs > $VERL_REWARD_SERVICE_URL > $VERL_REWARD_SHM_NAME >
    "verl_reward_shm". Cached per process id, so forked Ray workers connect anew."""
    if not shm_name and not service_url:
        service_url = os.environ.get("VERL_REWARD_SERVICE_URL") or None
        shm_name = os.environ.get("VERL_REWARD_SHM_NAME") or (None if service_url else DEFAULT_SHM_NAME)
    key = (os.getpid(), "http", service_url) if service_url else (os.getpid(), "shm", shm_name)
    with _clients_lock:
        c = _clients.get(key)
        if c is None:
            if service_url:
                c = HttpRewardClient(service_url, timeout_s=timeout_s)
            else:
                c = RewardClient(shm_name, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s)
            _clients[key] = c
        return c, key


def _drop_client(key):
    with _clients_lock:
        c = _clients.pop(key, None)
    if c is not None:
        c.close()


def score_sequences(sequences, extras=None, shm_name=None, service_url=None, timeout_s=60.0,
                    connect_timeout_s=30.0, with_info=False):
    """Scores through the cached client; after ServerGone / ServerRestarted it
    reconnects once (waiting up to connect_timeout_s) and resends."""
    for attempt in (0, 1):
        client, key = get_client(shm_name, service_url, timeout_s, connect_timeout_s)
        try:
            res = client.score_with_info(sequences, extras)
            return res if with_info else res.scores
        except ServerGone:
            _drop_client(key)
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------
# helpers that accept torch tensors, numpy arrays and nested lists alike

def _tolist(x):
    if hasattr(x, "detach"):
        x = x.detach().cpu()
    return x.tolist() if hasattr(x, "tolist") else [list(r) if hasattr(r, "__iter__") else r for r in x]


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _item(seq, i):
    """seq[i] for lists, numpy object arrays and None."""
    if seq is None:
        return None
    v = seq[i]
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes, dict)) else v


def _plain(v):
    """numpy/torch containers inside extra_info -> plain Python for msgpack."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):
        return _plain(v.tolist())
    return v


def _ground_truth(v):
    """The server takes ground_truth as text or a number; other values go as their str()."""
    v = _plain(v)
    if v is None or isinstance(v, (str, int, float)):
        return v
    return str(v)


_tokenizers = {}


def _load_tokenizer(tok):
    if tok is None or hasattr(tok, "encode"):
        return tok
    if tok not in _tokenizers:
        try:
            from transformers import AutoTokenizer   # only when a tokenizer path is given
        except ImportError:
            raise InvalidRequest(_INVAL, "reward_kwargs.tokenizer=%r needs the transformers package" % tok) from None
        _tokenizers[tok] = AutoTokenizer.from_pretrained(tok)
    return _tokenizers[tok]


def _ids_for_sample(i, solution_str, extra_info, tokenizer, prompt_key="prompt"):
    info = extra_info if isinstance(extra_info, dict) else {}
    if info.get("input_ids") is not None:
        return _tolist(info["input_ids"]) if not isinstance(info["input_ids"], list) else info["input_ids"]
    if info.get("response_ids") is not None:
        prompt = info.get("prompt_ids")
        prompt = [] if prompt is None else (prompt if isinstance(prompt, list) else _tolist(prompt))
        resp = info["response_ids"]
        return prompt + (resp if isinstance(resp, list) else _tolist(resp))
    if tokenizer is not None:
        text = str(info.get(prompt_key) or "") + str(solution_str)
        return list(tokenizer.encode(text))
    raise InvalidRequest(
        _INVAL, "sample %d: no token ids. verl's batch reward manager passes strings only: put "
        "'input_ids' (or 'prompt_ids' + 'response_ids') in extra_info, set "
        "custom_reward_function.reward_kwargs.tokenizer, or use VerlRewardManager" % i, i)


def compute_score(data_sources, solution_strs, ground_truths, extra_infos=None, shm_name=None,
                  service_url=None, timeout_s=60.0, connect_timeout_s=30.0, tokenizer=None,
                  send_extras=True, prompt_key="prompt", rm_tokenizer_dir=None, **unused_reward_kwargs):
    """verl batch reward function -> list[float], one per sample.

    Token ids of sample i come from extra_infos[i]["input_ids"] (the whole sequence
    as the reward model should read it), else extra_infos[i]["prompt_ids"] +
    ["response_ids"], else tokenizer.encode(extra_info[prompt_key] + solution_str) when
    reward_kwargs has tokenizer (a path / hub name for transformers.AutoTokenizer,
    or an object with .encode; prompt_key defaults to "prompt", missing = ""), or
    rm_tokenizer_dir (the project's own tokenizer of that directory, verl_reward.text: no
    transformers).
    With send_extras, each sequence also carries a msgpack map {data_source,
    solution_str, ground_truth, extra_info} for the server's rule rewards (token-id
    keys removed from extra_info)."""
    from .service import rm_tokenizer_from
    n = len(solution_strs)
    tok = _load_tokenizer(rm_tokenizer_from(tokenizer, rm_tokenizer_dir))
    seqs, extras = [], []
    for i in range(n):
        info = _item(extra_infos, i) if extra_infos is not None else None
        info = _plain(info) if info is not None else None
        seqs.append(_ids_for_sample(i, solution_strs[i], info, tok, prompt_key))
        if send_extras:
            slim = {k: v for k, v in info.items() if k not in _ID_KEYS} if isinstance(info, dict) else info
            extras.append({"data_source": _plain(_item(data_sources, i)),
                           "solution_str": str(solution_strs[i]),
                           "ground_truth": _ground_truth(_item(ground_truths, i)),
                           "extra_info": slim})
    if n == 0:
        return []
    return score_sequences(seqs, extras if send_extras else None, shm_name, service_url,
                           timeout_s, connect_timeout_s)


# ---------------------------------------------------------------------------
# token-level placement (verl's RewardModelWorker._expand_to_token_level)

def last_token_index(attention_mask, position_ids=None):
    """Per row: argmax(position_ids * attention_mask) with first-maximum ties, as
    verl computes it; position_ids default to clip(cumsum(mask) - 1, 0) (verl's
    compute_position_id_with_mask). Returns a list of ints (torch path: a tensor)."""
    if _is_torch(attention_mask):
        import torch
        if position_ids is None:
            position_ids = torch.clip(torch.cumsum(attention_mask, dim=-1) - 1, min=0)
        elif position_ids.dim() == 3:          # qwen2-vl mrope (bs, 3, seqlen)
            position_ids = position_ids[:, 0, :]
        return torch.argmax(position_ids * attention_mask, dim=-1)
    m = _as_numpy(attention_mask) if _np is not None else None
    if m is None and _np is not None and isinstance(attention_mask, (list, tuple)):
        m = _np.asarray(attention_mask)
    if m is not None and m.ndim == 2:              # numpy: vectorised, same rule
        pos = _as_numpy(position_ids) if position_ids is not None and not isinstance(position_ids, (list, tuple)) \
            else (None if position_ids is None else _np.asarray(position_ids))
        if pos is None:
            pos = _np.clip(_np.cumsum(m, axis=-1) - 1, 0, None)
        elif pos.ndim == 3:                         # (bs, 3, seqlen)
            pos = pos[:, 0, :]
        return _np.argmax(pos * m, axis=-1).tolist()   # first maximum, as torch.argmax
    mask = _tolist(attention_mask)
    if position_ids is None:
        pos = []
        for row in mask:
            acc, out = 0, []
            for m in row:
                acc += int(m)
                out.append(max(acc - 1, 0))
            pos.append(out)
    else:
        pos = _tolist(position_ids)
        if pos and pos[0] and isinstance(pos[0][0], list):   # (bs, 3, seqlen)
            pos = [p[0] for p in pos]
    idx = []
    for prow, mrow in zip(pos, mask):
        best, arg = None, 0
        for t, (p, m) in enumerate(zip(prow, mrow)):
            v = p * m
            if best is None or v > best:
                best, arg = v, t
        idx.append(arg)
    return idx


def expand_to_token_level(scores, attention_mask, response_length, position_ids=None, like=None):
    """(bs,) scores -> (bs, response_length) rewards, score at the last valid token.

    A row whose last valid token lies in the prompt part gets no reward (verl's
    slice drops it). Output type follows `like` (torch tensor / numpy array) or,
    without one, attention_mask; nested lists otherwise."""
    like = attention_mask if like is None else like
    if _is_torch(attention_mask):
        import torch
        seqlen = attention_mask.shape[-1]
        eos = last_token_index(attention_mask, position_ids)
        full = torch.zeros(attention_mask.shape, dtype=torch.float32, device=attention_mask.device)
        s = torch.as_tensor(scores, dtype=torch.float32, device=attention_mask.device)
        full[torch.arange(attention_mask.shape[0], device=attention_mask.device), eos] = s
        return full[:, seqlen - response_length:]
    m = _as_numpy(attention_mask) if _np is not None else None
    if m is not None and m.ndim == 2:              # numpy: one scatter
        eos = _np.asarray(last_token_index(m, position_ids), dtype=_np.int64)
        j = eos - (m.shape[1] - response_length)
        out = _np.zeros((m.shape[0], response_length), dtype=_np.float32)
        rows = _np.nonzero((j >= 0) & (j < response_length))[0]
        out[rows, j[rows]] = _np.asarray(scores, dtype=_np.float32)[rows]
        return out if type(like).__module__.startswith("numpy") else out.tolist()
    mask = _tolist(attention_mask)
    eos = last_token_index(mask, position_ids)
    out = []
    for row, e, s in zip(mask, eos, scores):
        r = [0.0] * response_length
        j = e - (len(row) - response_length)
        if 0 <= j < response_length:
            r[j] = float(s)
        out.append(r)
    if type(like).__module__.startswith("numpy"):
        import numpy
        return numpy.asarray(out, dtype=numpy.float32).reshape(len(out), response_length)
    return out


def valid_sequences(input_ids, attention_mask):
    """Rows of input_ids restricted to attention_mask != 0, as PackedSequences (indexable:
    [i] is sequence i as a list; vectorised for numpy arrays and torch tensors)."""
    return pack_padded(input_ids, attention_mask)


def _batch_get(batch, key):
    try:
        if key in batch.keys():
            return batch[key]
    except AttributeError:
        pass
    return None


class VerlRewardManager:
    """verl reward manager backed by verl-reward-server.

    Constructed like verl's own managers: (tokenizer, num_examine, compute_score,
    reward_fn_key, **reward_kwargs); reward_kwargs: shm_name or service_url,
    timeout_s, connect_timeout_s, send_extras (default True: each sequence carries
    {data_source, ground_truth, extra_info[, solution_str when a tokenizer is
    given]} for the server's rule rewards). compute_score is ignored (the server
    scores). client: an object with score_with_info() to use instead (tests).

    __call__(data, return_dict=False) -> reward tensor (bs, response_len); with
    return_dict: {"reward_tensor": ..., "reward_extra_info": {component: [...]}}.
    A batch that already holds "rm_scores" is returned as is (verl's convention)."""

    def __init__(self, tokenizer=None, num_examine=0, compute_score=None, reward_fn_key="data_source",
                 shm_name=None, service_url=None, timeout_s=60.0, connect_timeout_s=30.0,
                 send_extras=True, client=None, **unused_reward_kwargs):
        self.tokenizer = tokenizer
        self.num_examine = int(num_examine or 0)
        self.reward_fn_key = reward_fn_key
        self.shm_name = shm_name
        self.service_url = service_url
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.send_extras = send_extras
        self.client = client

    def _score(self, seqs, extras):
        if self.client is not None:
            return self.client.score_with_info(seqs, extras)
        return score_sequences(seqs, extras, self.shm_name, self.service_url, self.timeout_s,
                               self.connect_timeout_s, with_info=True)

    def _extras(self, data, seqs_resp):
        ntb = getattr(data, "non_tensor_batch", None) or {}
        n = len(seqs_resp)
        sources = ntb.get(self.reward_fn_key)
        rm = ntb.get("reward_model")
        infos = ntb.get("extra_info")
        out = []
        for i in range(n):
            e = {}
            if sources is not None:
                e["data_source"] = _plain(_item(sources, i))
            if rm is not None and isinstance(_item(rm, i), dict):
                e["ground_truth"] = _ground_truth(_item(rm, i).get("ground_truth"))
            if infos is not None:
                e["extra_info"] = _plain(_item(infos, i))
            if self.tokenizer is not None:
                e["solution_str"] = self.tokenizer.decode(seqs_resp[i], skip_special_tokens=True)
            out.append(e)
        return out

    def __call__(self, data, return_dict=False):
        batch = data.batch
        rm_scores = _batch_get(batch, "rm_scores")
        if rm_scores is not None:
            return {"reward_tensor": rm_scores, "reward_extra_info": {}} if return_dict else rm_scores
        responses = batch["responses"]
        attention_mask = batch["attention_mask"]
        response_length = responses.shape[-1] if hasattr(responses, "shape") else len(responses[0])
        input_ids = _batch_get(batch, "input_ids")
        if input_ids is None:        # verl always has it; rebuild prompt + response otherwise
            prompts = batch["prompts"]
            if _is_torch(prompts):
                import torch
                input_ids = torch.cat([prompts, responses], dim=-1)
            else:
                input_ids = [p + r for p, r in zip(_tolist(prompts), _tolist(responses))]
        seqs = valid_sequences(input_ids, attention_mask)
        extras = None
        if self.send_extras:
            resp = responses
            if _is_torch(attention_mask) or _as_numpy(attention_mask) is not None:
                resp_mask = attention_mask[:, attention_mask.shape[-1] - response_length:]
            else:
                resp_mask = [mr[len(mr) - response_length:] for mr in _tolist(attention_mask)]
                resp = _tolist(responses)
            extras = self._extras(data, pack_padded(resp, resp_mask))
        res = self._score(seqs, extras)
        reward = expand_to_token_level(res.scores, attention_mask, response_length,
                                       _batch_get(batch, "position_ids"), like=responses)
        self._examine(data, seqs, res.scores)
        if return_dict:
            info = dict(res.components)
            info.setdefault("verl_reward_score", list(res.scores))
            return {"reward_tensor": reward, "reward_extra_info": info}
        return reward

    def _examine(self, data, seqs, scores):
        if not self.num_examine or self.tokenizer is None:
            return
        ntb = getattr(data, "non_tensor_batch", None) or {}
        sources = ntb.get(self.reward_fn_key)
        printed = {}
        for i, s in enumerate(scores):
            src = _item(sources, i) if sources is not None else "?"
            if printed.get(src, 0) >= self.num_examine:
                continue
            printed[src] = printed.get(src, 0) + 1
            print("[verl_reward] [sequence]", self.tokenizer.decode(seqs[i], skip_special_tokens=True))
            print("[verl_reward] [score]", s)


def register_with_verl(name="verl_reward"):
    """Registers VerlRewardManager in verl's legacy reward-manager registry (verl >= 0.5:
    verl.workers.reward_manager.register) and, from verl 0.7.0, VerlRewardLoopManager in
    the reward loop's registry (what verl >= 0.7 actually reads by default): see
    verl_reward.verl_reward_loop.register_with_verl. Returns True when any registry took it."""
    from .verl_reward_loop import register_with_verl as register_all
    return any(register_all(name).values())
