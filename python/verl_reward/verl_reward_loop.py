"""verl's reward loop (verl >= 0.7.0): a reward manager scored by verl-reward-server.

From verl 0.7.0 the reward loop is the default: RewardLoopWorker (a Ray actor) builds
one reward manager and awaits `manager.run_single(data[i:i+1])` once per sample, all
samples of its chunk concurrently (RewardLoopWorker.compute_score_batch). Our
VerlRewardLoopManager answers each of those calls through a MicroBatcher, so the
samples still reach the server (and the GPU) as batches of up to max_batch.

What verl's source defines (volcengine/verl, read at the tags named; the stand-ins in
tests/python/verl_loop_standin.py follow the same files):
  - base class verl.experimental.reward_loop.reward_manager.base.RewardManagerBase:
    __init__(config, tokenizer) at v0.7.0, __init__(config, tokenizer, compute_score)
    from v0.7.1 (v0.8.0, v0.9.0 and main add the classmethod assemble_rm_scores);
  - construction: v0.7.0 RewardLoopWorker._init_reward_fn calls
    cls(config, tokenizer, reward_fn, reward_router_address, reward_model_tokenizer);
    from v0.7.1 verl.trainer.ppo.reward.load_reward_manager calls
    cls(config=, tokenizer=, compute_score=, reward_router_address=, reward_model_tokenizer=);
  - lookup: v0.7.0 config.reward_model.reward_manager (+ reward_loop_source register |
    importlib with reward_loop_module_path / reward_loop_class_name); from v0.7.1
    config.reward.reward_manager.{source, name, module.path} (importlib: the class
    named `name` in module.path, "pkg://verl_reward.verl_reward_loop" works);
  - run_single's result: {"reward_score": float, "reward_extra_info": {key: value}},
    placed by verl at the last valid response token; every sample must carry the same
    reward_extra_info keys (RewardLoopManager.compute_rm_score reads the first's keys).

Settings (reward_kwargs): `reward.reward_kwargs` (v0.7.1+) or `reward_model.reward_kwargs`
(v0.7.0), any of: shm_name | service_url, timeout_s, connect_timeout_s, max_batch,
linger_ms, max_inflight, input ("ids" | "chat" | "text"), rm_tokenizer, rm_tokenizer_dir (the
project's own tokenizer for text over shm, no transformers: verl_reward.text), send_extras,
score_component, extra_components. docs/operations.md has the YAML per verl version.

Importing this module needs neither verl nor torch; VerlRewardLoopManager is built on
first access from the installed verl (ImportError with the fix when verl is missing).
"""

import re

from ._batch import masked_ids
from .errors import STATUS_VALUES, InvalidRequest
from .service import RewardService, load_tokenizer, rm_tokenizer_from

_INVAL = STATUS_VALUES["VR_ERR_INVAL"]
INPUT_FORMS = ("ids", "chat", "text")

SERVICE_KEYS = ("shm_name", "service_url", "timeout_s", "connect_timeout_s", "max_batch", "linger_ms",
                "max_inflight")


def verl_version():
    """The installed verl's version as a tuple of ints ((0, 7, 1)), or None without verl.
    Suffixes (.dev, rc, .post) are dropped: 0.8.0.dev -> (0, 8, 0)."""
    text = None
    try:
        from importlib import metadata
        text = metadata.version("verl")
    except Exception:
        text = None
    if text is None:
        try:
            import verl
        except ImportError:
            return None
        text = getattr(verl, "__version__", None)
    if not isinstance(text, str):
        return None
    parts = []
    for p in text.split(".")[:3]:
        m = re.match(r"\d+", p)
        if not m:
            break
        parts.append(int(m.group(0)))
    return tuple(parts) if parts else None


def _get(cfg, key):
    """cfg.get(key) for dicts and omegaconf DictConfigs alike; None when absent."""
    if cfg is None:
        return None
    try:
        return cfg.get(key)
    except (AttributeError, TypeError):
        return getattr(cfg, key, None)


def _plain_dict(d):
    if d is None:
        return {}
    try:
        from omegaconf import OmegaConf      # verl's configs are DictConfigs
        if OmegaConf.is_config(d):
            return OmegaConf.to_container(d, resolve=True)
    except ImportError:
        pass
    return dict(d)


def reward_kwargs_from_config(config):
    """The manager's settings: config.reward.reward_kwargs (verl >= 0.7.1, where
    migrate_legacy_reward_impl also moves reward_model.reward_kwargs there), else
    config.reward_model.reward_kwargs (verl 0.7.0), else {}."""
    for section in ("reward", "reward_model"):
        kw = _get(_get(config, section), "reward_kwargs")
        if kw is not None:
            return _plain_dict(kw)
    return {}


# ---------------------------------------------------------------------------
# one sample of verl's DataProto (data[0] of a length-1 DataProto)

def valid_ids(ids, mask):
    """1-D ids restricted to mask != 0 -> list of int (one masked select for numpy / torch)."""
    return masked_ids(ids, mask)


def sample_parts(item):
    """verl's DataProtoItem -> (prompt_ids, response_ids) of its valid tokens.
    Reads batch["prompts"], ["responses"], ["attention_mask"] (prompt_len +
    response_len columns), any padding side."""
    prompts, responses, mask = item.batch["prompts"], item.batch["responses"], item.batch["attention_mask"]
    p_len = prompts.shape[-1]
    return valid_ids(prompts, mask[:p_len]), valid_ids(responses, mask[p_len:])


def _ntb(item, key, default=None):
    ntb = getattr(item, "non_tensor_batch", None) or {}
    v = ntb.get(key, default) if hasattr(ntb, "get") else default
    return default if v is None else v


def _plain(v):
    from .verl_adapter import _plain as plain
    return plain(v)


class _LoopManagerImpl:
    """The behaviour of VerlRewardLoopManager, independent of verl's base class."""

    def _vr_setup(self, tokenizer, reward_kwargs, reward_router_address=None, reward_model_tokenizer=None,
                  service=None):
        kw = dict(reward_kwargs)
        self.input_form = kw.pop("input", "ids")
        if self.input_form not in INPUT_FORMS:
            raise InvalidRequest(_INVAL, "reward_kwargs.input=%r: expected one of %s"
                                 % (self.input_form, ", ".join(INPUT_FORMS)))
        self.send_extras = bool(kw.pop("send_extras", True))
        self.score_component = kw.pop("score_component", None)
        extra = kw.pop("extra_components", None)
        self.extra_components = None if extra in (None, "all") else [str(x) for x in (
            [extra] if isinstance(extra, str) else extra)]
        self.reward_fn_key = kw.pop("reward_fn_key", "data_source")
        rm_tok = rm_tokenizer_from(kw.pop("rm_tokenizer", None) or reward_model_tokenizer,
                                   kw.pop("rm_tokenizer_dir", None))
        svc = {k: kw.pop(k) for k in SERVICE_KEYS if k in kw}
        kw.pop("add_special_tokens", None)
        if kw:
            # other managers' keys (e.g. DAPO's overlong_buffer_cfg) may share reward_kwargs
            self.unused_reward_kwargs = kw
        self.policy_tokenizer = tokenizer
        self.reward_router_address = reward_router_address
        self.service = service or RewardService.get(rm_tokenizer=rm_tok, **svc)

    # -- per sample ------------------------------------------------------------
    def _extra(self, item, response_ids):
        gt = _ntb(item, "reward_model", {})
        info = _ntb(item, "extra_info", None)
        e = {"data_source": _plain(_ntb(item, self.reward_fn_key)),
             "ground_truth": _plain(gt.get("ground_truth") if hasattr(gt, "get") else None)}
        if info is not None:
            e["extra_info"] = _plain(info)
        if self.policy_tokenizer is not None:
            e["solution_str"] = self.policy_tokenizer.decode(response_ids, skip_special_tokens=True)
        if e["ground_truth"] is not None and not isinstance(e["ground_truth"], (str, int, float)):
            e["ground_truth"] = str(e["ground_truth"])
        return e

    def _chat(self, item, response_ids):
        """verl's discriminative-RM conversation: raw_prompt + the response decoded with
        the policy tokenizer, EOS text removed (RewardLoopWorker._preprocess_reward_inputs)."""
        raw = _ntb(item, "raw_prompt")
        if raw is None:
            raise InvalidRequest(_INVAL, "reward_kwargs.input=chat needs non_tensor_batch['raw_prompt'] "
                                 "(verl's data.return_raw_chat=True)")
        tok = self.policy_tokenizer
        text = tok.decode(response_ids)
        eos = getattr(tok, "eos_token", None)
        if eos:
            text = text.replace(eos, "")
        return [dict(m) for m in list(raw)] + [{"role": "assistant", "content": text}]

    def _input(self, item, prompt_ids, response_ids):
        if self.input_form == "ids":
            return "ids", prompt_ids + response_ids
        if self.policy_tokenizer is None:
            raise InvalidRequest(_INVAL, "reward_kwargs.input=%s needs verl's policy tokenizer" % self.input_form)
        if self.input_form == "chat":
            return "messages", self._chat(item, response_ids)
        return "text", self.policy_tokenizer.decode(prompt_ids + response_ids, skip_special_tokens=False)

    def _result(self, score, components):
        total = components.get(self.score_component) if self.score_component else score
        if total is None:
            raise InvalidRequest(_INVAL, "reward_kwargs.score_component=%r: the server sent components %s"
                                 % (self.score_component, sorted(components)))
        names = sorted(components) if self.extra_components is None else self.extra_components
        info = {"score": float(total)}
        for n in names:
            info[n] = float(components.get(n, float("nan")))
        return {"reward_score": float(total), "reward_extra_info": info}

    async def run_single(self, data):
        """One sample (a length-1 DataProto) -> {"reward_score", "reward_extra_info"}; the
        request joins the others in flight (MicroBatcher)."""
        if len(data) != 1:
            raise InvalidRequest(_INVAL, "run_single takes one sample, got %d" % len(data))
        item = data[0]
        prompt_ids, response_ids = sample_parts(item)
        form, x = self._input(item, prompt_ids, response_ids)
        extra = self._extra(item, response_ids) if self.send_extras else None
        score, comps = await self.service.score_async(form, x, extra)
        return self._result(score, comps)


def _missing_verl_class(reason):
    class VerlRewardLoopManager:
        def __init__(self, *args, **kwargs):
            raise ImportError("verl_reward.VerlRewardLoopManager subclasses verl's RewardManagerBase "
                              "(verl >= 0.7.0), which could not be imported: %s. Install verl, or use "
                              "verl_reward.verl_adapter.VerlRewardManager with verl 0.4-0.6" % reason)
    return VerlRewardLoopManager


def build_loop_manager_class():
    """VerlRewardLoopManager for the installed verl: a subclass of its RewardManagerBase
    whose __init__ passes the base what that version takes."""
    try:
        from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    except ImportError as e:
        return _missing_verl_class(e)
    version = verl_version()
    three_args = version is None or version >= (0, 7, 1)

    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None,
                 reward_model_tokenizer=None, **kwargs):
        if three_args:
            RewardManagerBase.__init__(self, config, tokenizer, compute_score)
        else:
            RewardManagerBase.__init__(self, config, tokenizer)
            self.compute_score = compute_score
        kw = reward_kwargs_from_config(config)
        kw.update(kwargs)
        self._vr_setup(tokenizer, kw, reward_router_address, reward_model_tokenizer)

    doc = ("verl reward-loop manager backed by verl-reward-server (built for verl %s; see "
           "verl_reward.verl_reward_loop)" % (".".join(map(str, version)) if version else "?"))
    return type("VerlRewardLoopManager", (_LoopManagerImpl, RewardManagerBase),
                {"__init__": __init__, "__doc__": doc, "__module__": __name__})


_built = {}


def __getattr__(name):
    # PEP 562: verl's importlib lookup does getattr(module, "VerlRewardLoopManager")
    if name == "VerlRewardLoopManager":
        if "cls" not in _built:
            _built["cls"] = build_loop_manager_class()
        return _built["cls"]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ---------------------------------------------------------------------------
# per-sample compute_score for verl's own managers (naive reward loop / legacy naive)

def _sample_inputs(solution_str, extra_info, kw):
    from .verl_adapter import _ID_KEYS, _ids_for_sample, _load_tokenizer
    info = _plain(extra_info) if extra_info is not None else None
    tok = _load_tokenizer(rm_tokenizer_from(kw.get("tokenizer"), kw.get("rm_tokenizer_dir")))
    ids = _ids_for_sample(0, solution_str, info, tok, kw.get("prompt_key", "prompt"))
    slim = {k: v for k, v in info.items() if k not in _ID_KEYS} if isinstance(info, dict) else info
    return ids, slim


def _sample_extra(data_source, solution_str, ground_truth, slim):
    from .verl_adapter import _ground_truth
    return {"data_source": _plain(data_source), "solution_str": str(solution_str),
            "ground_truth": _ground_truth(ground_truth), "extra_info": slim}


def _service_for(kw):
    return RewardService.get(rm_tokenizer=rm_tokenizer_from(kw.get("rm_tokenizer"), kw.get("rm_tokenizer_dir")),
                             **{k: kw[k] for k in SERVICE_KEYS if k in kw})


def _sample_result(score, comps, kw):
    if kw.get("return_dict"):
        out = {"score": score}
        out.update(comps)
        return out
    return score


def compute_score_sample(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kw):
    """verl's per-sample custom reward function: compute_score(data_source=,
    solution_str=, ground_truth=, extra_info=, **reward_kwargs) -> float (with
    reward_kwargs.return_dict: {"score", component: value}). Token ids as for the batch
    function (extra_info input_ids / prompt_ids + response_ids, or reward_kwargs.tokenizer).
    verl calls it from executor threads, many at once: the calls are batched."""
    ids, slim = _sample_inputs(solution_str, extra_info, kw)
    extra = _sample_extra(data_source, solution_str, ground_truth, slim) if kw.get("send_extras", True) else None
    score, comps = _service_for(kw).submit("ids", ids, extra).result()
    return _sample_result(score, comps, kw)


async def compute_score_sample_async(data_source=None, solution_str=None, ground_truth=None, extra_info=None,
                                     **kw):
    """The async twin of compute_score_sample (verl awaits it on its reward loop)."""
    ids, slim = _sample_inputs(solution_str, extra_info, kw)
    extra = _sample_extra(data_source, solution_str, ground_truth, slim) if kw.get("send_extras", True) else None
    score, comps = await _service_for(kw).score_async("ids", ids, extra)
    return _sample_result(score, comps, kw)


_VERL_EXTRA_KWARGS = ("reward_router_address", "reward_model_tokenizer")


def compute_score(*args, **kwargs):
    """One name for every verl version's custom_reward_function:
      - batch call (BatchRewardManager, reward_manager=batch, verl 0.4-0.7.0 legacy):
        compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=, **kw)
        -> list[float];
      - per-sample call (naive managers, reward loop): compute_score(data_source=,
        solution_str=, ground_truth=, extra_info=, **kw) -> float.
    Chosen by the keywords verl passes."""
    for k in _VERL_EXTRA_KWARGS:
        kwargs.pop(k, None)          # the reward loop adds these when an RM router exists
    if "solution_strs" in kwargs or "data_sources" in kwargs:
        from .verl_adapter import compute_score as batch
        return batch(*args, **kwargs)
    return compute_score_sample(*args, **kwargs)


async def compute_score_async(data_source=None, solution_str=None, ground_truth=None, extra_info=None, **kw):
    """Async per-sample custom reward function (verl >= 0.7.0 awaits coroutine functions)."""
    for k in _VERL_EXTRA_KWARGS:
        kw.pop(k, None)
    return await compute_score_sample_async(data_source, solution_str, ground_truth, extra_info, **kw)


# ---------------------------------------------------------------------------
# registration

def register_with_verl(name="verl_reward"):
    """Registers our managers under `name` in every registry the installed verl reads:
      - verl.workers.reward_manager.register (verl >= 0.5; legacy batch managers,
        config reward_model.reward_manager=NAME): VerlRewardManager;
      - verl.experimental.reward_loop.reward_manager.register (verl >= 0.7.0; the reward
        loop, config reward_model.reward_manager=NAME (0.7.0) or
        reward.reward_manager.name=NAME (0.7.1+)): VerlRewardLoopManager.
    Registries live in each process: verl loads custom_reward_function.path (our
    verl_custom_reward.py calls this on import) before it looks a name up, in the
    driver and in every reward-loop worker. Returns {"legacy": bool, "reward_loop": bool}."""
    done = {"legacy": False, "reward_loop": False}
    try:
        from verl.workers.reward_manager import register as legacy_register
    except ImportError:
        legacy_register = None
    if legacy_register is not None:
        from .verl_adapter import VerlRewardManager
        legacy_register(name)(VerlRewardManager)
        done["legacy"] = True
    try:
        from verl.experimental.reward_loop.reward_manager import register as loop_register
    except ImportError:
        loop_register = None
    if loop_register is not None:
        loop_register(name)(__getattr__("VerlRewardLoopManager"))
        done["reward_loop"] = True
    return done
