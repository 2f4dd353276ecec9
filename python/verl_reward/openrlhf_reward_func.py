"""File for OpenRLHF's `--reward.remote_url /path/to/this/file.py` (`--remote_rm_url` in
OpenRLHF releases before 0.11): OpenRLHF loads it with importlib.util.spec_from_file_location
and calls `reward_func(queries, prompts, labels)` from worker threads, one query per call
(openrlhf/utils/agent.py, SingleTurnAgentExecutor._fetch_rewards_via_func, v0.11.0).
Print its path with

    python3 -c "import verl_reward.openrlhf_reward_func as m; print(m.__file__)"

Concurrent calls are batched into few server requests (verl_reward.service). OpenRLHF
passes no settings, so they come from the environment of the OpenRLHF processes:
  VERL_REWARD_SHM_NAME / VERL_REWARD_SERVICE_URL   where the server is (shm default verl_reward_shm)
  VERL_REWARD_RM_TOKENIZER   the reward model's tokenizer (path / hub name): queries are
                             tokenised with it (add_special_tokens=False: OpenRLHF decodes
                             queries with their special tokens). Without it, only
                             VERL_REWARD_SERVICE_URL works (the server tokenises the text).
  VERL_REWARD_DATA_SOURCE    data_source given to the server's rule components (optional)
  VERL_REWARD_TIMEOUT_S      per-request timeout (default 60)
Returns OpenRLHF's dict: {"rewards": [float], "scores": [float], "extra_logs": {component: [float]}}.
"""
import os

from verl_reward.openrlhf_bridge import get_reward
from verl_reward.service import RewardService


def _service():
    return RewardService.get(shm_name=os.environ.get("VERL_REWARD_SHM_NAME") or None,
                             service_url=os.environ.get("VERL_REWARD_SERVICE_URL") or None,
                             rm_tokenizer=os.environ.get("VERL_REWARD_RM_TOKENIZER") or None,
                             timeout_s=float(os.environ.get("VERL_REWARD_TIMEOUT_S") or 60.0))


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF's reward function: lists of equal length -> {"rewards", "scores", "extra_logs"}."""
    return get_reward(_service(), {"query": list(queries), "prompts": list(prompts), "labels": list(labels)},
                      os.environ.get("VERL_REWARD_DATA_SOURCE") or None)
