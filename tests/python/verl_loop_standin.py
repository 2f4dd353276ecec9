"""Stand-ins for the parts of verl's reward loop our managers meet (verl is not
installable here). Written from verl's interfaces as its source defines them, no verl
code copied; each piece names the file and tag it follows (github.com/volcengine/verl,
mirrored as verl-project/verl; tags v0.7.0 = 7522bef0e, v0.7.1, v0.9.0):

  verl/experimental/reward_loop/reward_manager/base.py   RewardManagerBase:
      v0.7.0  __init__(self, config, tokenizer)
      v0.7.1+ __init__(self, config, tokenizer, compute_score)      (v0.9.0, main: same)
      abstract `async run_single(self, data)`; sets self.loop (verl.utils.ray_utils.get_event_loop)
  verl/experimental/reward_loop/reward_manager/registry.py   register(name) decorator
      (ValueError when a name is taken by another class), get_reward_manager_cls(name)
      (ValueError "Unknown reward manager")
  verl/workers/reward_manager/registry.py (v0.5.0+)     the legacy registry, same contract
  verl/utils/import_utils.py load_extern_object(module_path, object_name) (v0.7.0+):
      "pkg://a.b" imports a.b; a file path is executed under a fresh module name
  verl/experimental/reward_loop/reward_loop.py RewardLoopWorker:
      v0.7.0  _init_reward_fn: reward_fn = get_custom_reward_fn(config) (loads
              custom_reward_function.path first), then class by
              config.reward_model.reward_loop_source ("register":
              get_reward_manager_cls(config.reward_model.reward_manager); "importlib":
              reward_loop_module_path / reward_loop_class_name), constructed POSITIONALLY
              cls(config, tokenizer, reward_fn, reward_router_address, reward_model_tokenizer)
      v0.7.1+ verl/trainer/ppo/reward.py load_reward_manager: get_custom_reward_fn(config)
              (config.reward.custom_reward_function), then config.reward.reward_manager
              .source / .name / .module.path, constructed with KEYWORDS config=,
              tokenizer=, compute_score=, reward_router_address=, reward_model_tokenizer=
      compute_score_batch(data): one task per sample, run_single(data[i:i+1]), gathered
      RewardLoopManager.compute_rm_score: rm_scores zeros like responses, the score at
              [i, valid_response_length - 1] (valid_response_length = attention_mask[:,
              prompt_length:].sum(1)); reward_extra_info keys read from the first sample.
  verl/protocol.py DataProto: len(data); data[i] -> DataProtoItem (batch: per-sample
      tensors, non_tensor_batch: per-sample values); data[i:j] -> DataProto.
"""

import asyncio
import importlib
import importlib.util
import os
import sys
import types

from verl_standin import DataProtoStandIn, ListTensor, TensorDictStandIn


class Row(list):
    """A 1-D per-sample tensor: shape, slicing, sum, tolist (what the managers touch)."""

    @property
    def shape(self):
        return (len(self),)

    def __getitem__(self, k):
        v = list.__getitem__(self, k)
        return Row(v) if isinstance(k, slice) else v

    def sum(self):
        return sum(self)

    def tolist(self):
        return list(self)


class ItemStandIn:
    def __init__(self, batch, non_tensor_batch):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch


def _native(v):
    """torch tensors and numpy arrays index themselves (as TensorDict's do); ListTensor does not."""
    return hasattr(v, "detach") or type(v).__module__ == "numpy"


def _take(data, idx):
    """DataProto.__getitem__ for an int (item) or a slice (DataProto)."""
    if isinstance(idx, slice):
        rows = range(len(data))[idx]
        t = {k: ListTensor([v.tolist()[i] for i in rows]) if not _native(v) else v[idx]
             for k, v in data.batch.items()}
        ntb = {k: [v[i] for i in rows] for k, v in data.non_tensor_batch.items()}
        return LoopData(TensorDictStandIn(t, len(rows)), ntb)
    t = {k: (v[idx] if _native(v) else Row(v.tolist()[idx])) for k, v in data.batch.items()}
    return ItemStandIn(t, {k: v[idx] for k, v in data.non_tensor_batch.items()})


class LoopData(DataProtoStandIn):
    def __getitem__(self, idx):
        return _take(self, idx)


def loop_data(data):
    """verl_standin.make_batch's DataProtoStandIn -> one that indexes like DataProto."""
    return LoopData(data.batch, data.non_tensor_batch, data.meta_info)


class Config(dict):
    """Attribute + .get access like omegaconf's DictConfig, over nested dicts."""

    def __getattr__(self, k):
        try:
            v = self[k]
        except KeyError:
            raise AttributeError(k) from None
        return v

    @staticmethod
    def of(d):
        return Config({k: Config.of(v) if isinstance(v, dict) else v for k, v in d.items()})


def _registry_module(name, what):
    mod = types.ModuleType(name)
    reg = {}

    def register(n):
        def deco(cls):
            if n in reg and reg[n] != cls:
                raise ValueError("%s %s has already been registered: %s vs %s" % (what, n, reg[n], cls))
            reg[n] = cls
            return cls
        return deco

    def get_reward_manager_cls(n):
        if n not in reg:
            raise ValueError("Unknown reward manager: %s" % n)
        return reg[n]

    mod.register, mod.get_reward_manager_cls, mod.REGISTRY = register, get_reward_manager_cls, reg
    return mod


def load_extern_object(module_path, object_name):
    if module_path.startswith("pkg://"):
        module = importlib.import_module(module_path[len("pkg://"):].replace("/", "."))
    else:
        if module_path.startswith("file://"):
            module_path = module_path[len("file://"):]
        if not os.path.exists(module_path):
            raise FileNotFoundError("Custom module file not found: %s" % module_path)
        spec = importlib.util.spec_from_file_location("custom_module_%d" % hash(os.path.abspath(module_path)),
                                                      module_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    if not hasattr(module, object_name):
        raise AttributeError("Object not found in module: %s, %s" % (object_name, module_path))
    return getattr(module, object_name)


class VerlStandIn:
    """Installs a fake `verl` of the given version into sys.modules (uninstall() removes it)."""

    NAMES = ("verl", "verl.experimental", "verl.experimental.reward_loop",
             "verl.experimental.reward_loop.reward_manager", "verl.experimental.reward_loop.reward_manager.base",
             "verl.workers", "verl.workers.reward_manager", "verl.utils", "verl.utils.import_utils")

    def __init__(self, version):
        self.version = version
        vt = tuple(int(x) for x in version.split(".")[:3] if x.isdigit())
        self.base_init_calls = []
        calls = self.base_init_calls
        mods = {n: types.ModuleType(n) for n in self.NAMES}
        mods["verl"].__version__ = version
        base = mods["verl.experimental.reward_loop.reward_manager.base"]

        class RewardManagerBase:
            _class_initialized = False

            def _common(self, config, tokenizer):
                self.config, self.tokenizer = config, tokenizer
                try:
                    self.loop = asyncio.get_running_loop()
                except RuntimeError:
                    self.loop = asyncio.new_event_loop()

            async def run_single(self, data):
                raise NotImplementedError

        if vt >= (0, 7, 1):
            def __init__(self, config, tokenizer, compute_score):
                calls.append((config, tokenizer, compute_score))
                self._common(config, tokenizer)
                self.compute_score = compute_score
        else:
            def __init__(self, config, tokenizer):
                calls.append((config, tokenizer))
                self._common(config, tokenizer)
        RewardManagerBase.__init__ = __init__
        base.RewardManagerBase = RewardManagerBase
        loop_reg = _registry_module("verl.experimental.reward_loop.reward_manager", "reward manager")
        loop_pkg = mods["verl.experimental.reward_loop.reward_manager"]
        loop_pkg.register, loop_pkg.get_reward_manager_cls = loop_reg.register, loop_reg.get_reward_manager_cls
        self.loop_registry = loop_reg.REGISTRY
        legacy = _registry_module("verl.workers.reward_manager", "reward manager")
        leg_pkg = mods["verl.workers.reward_manager"]
        leg_pkg.register, leg_pkg.get_reward_manager_cls = legacy.register, legacy.get_reward_manager_cls
        self.legacy_registry = legacy.REGISTRY
        mods["verl.utils.import_utils"].load_extern_object = load_extern_object
        self.modules = mods
        self.base = RewardManagerBase
        self.vt = vt

    def install(self):
        self.saved = {n: sys.modules.get(n) for n in self.NAMES}
        sys.modules.update(self.modules)
        import verl_reward.verl_reward_loop as vrl
        vrl._built.clear()           # built once per process in real use; per stand-in here
        return self

    def uninstall(self):
        for n, m in self.saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
        import verl_reward.verl_reward_loop as vrl
        vrl._built.clear()

    # -- verl's lookup + construction, per version ---------------------------
    def _custom_fn(self, cfg):
        if not cfg or not cfg.get("path"):
            return None
        return load_extern_object(cfg["path"], cfg.get("name", "compute_score"))

    def make_manager(self, config, tokenizer, reward_router_address=None, reward_model_tokenizer=None):
        """Builds the manager the way this version's RewardLoopWorker does."""
        if self.vt >= (0, 7, 1):
            fn = self._custom_fn(config.reward.get("custom_reward_function"))
            rm = config.reward.reward_manager
            if rm.source == "register":
                cls = self.modules["verl.experimental.reward_loop.reward_manager"].get_reward_manager_cls(rm.name)
            else:
                cls = load_extern_object(rm.module.path, rm.name)
            return cls(config=config, tokenizer=tokenizer, compute_score=fn,
                       reward_router_address=reward_router_address, reward_model_tokenizer=reward_model_tokenizer)
        fn = self._custom_fn(config.get("custom_reward_function"))
        src = config.reward_model.get("reward_loop_source", "register")
        if src == "register":
            cls = self.modules["verl.experimental.reward_loop.reward_manager"].get_reward_manager_cls(
                config.reward_model.reward_manager)
        else:
            cls = load_extern_object(config.reward_model.reward_loop_module_path,
                                     config.reward_model.reward_loop_class_name)
        return cls(config, tokenizer, fn, reward_router_address, reward_model_tokenizer)


async def compute_score_batch(manager, data):
    """RewardLoopWorker.compute_score_batch: every sample its own task, gathered."""
    tasks = [asyncio.create_task(manager.run_single(data[i:i + 1])) for i in range(len(data))]
    return await asyncio.gather(*tasks)


def place_scores(data, outputs):
    """RewardLoopManager.compute_rm_score's placement -> (rm_scores rows, extra info by key)."""
    prompts = data.batch["prompts"].tolist()
    mask = data.batch["attention_mask"].tolist()
    resp_len = len(data.batch["responses"].tolist()[0])
    p_len = len(prompts[0])
    rows = []
    for m, out in zip(mask, outputs):
        row = [0.0] * resp_len
        row[sum(m[p_len:]) - 1] = float(out["reward_score"])
        rows.append(row)
    keys = list(outputs[0].get("reward_extra_info", {}).keys())
    info = {k: [o["reward_extra_info"][k] for o in outputs] for k in keys}
    return rows, info
