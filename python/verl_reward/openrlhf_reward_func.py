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
Returns OpenRLHF's dict: {"rewards": [float], "scores": [float], "extra_logs": {component: [float]}},
the shape of the server's own POST /get_reward (the route OpenRLHF's HTTP form calls).
"""
import json
import os

from verl_reward.errors import STATUS_VALUES, InvalidRequest
from verl_reward.service import RewardService

_MALFORMED = STATUS_VALUES["VR_ERR_MALFORMED"]


def _service():
    return RewardService.get(shm_name=os.environ.get("VERL_REWARD_SHM_NAME") or None,
                             service_url=os.environ.get("VERL_REWARD_SERVICE_URL") or None,
                             rm_tokenizer=os.environ.get("VERL_REWARD_RM_TOKENIZER") or None,
                             timeout_s=float(os.environ.get("VERL_REWARD_TIMEOUT_S") or 60.0))


def _solution(query, prompt):
    """The response part: OpenRLHF's query is prompt + response, decoded together."""
    if isinstance(prompt, str) and prompt and query.startswith(prompt):
        return query[len(prompt):]
    return query


def get_reward(service, queries, prompts, labels, data_source=None):
    """Scores OpenRLHF's lists through `service` (one batch) -> {"rewards", "scores", "extra_logs"}.
    labels become ground_truth, query minus its prompt the solution_str of the rule components."""
    queries = list(queries)
    if not all(isinstance(q, str) for q in queries):
        raise InvalidRequest(_MALFORMED, "queries must be strings")
    prompts = [None] * len(queries) if prompts is None else list(prompts)
    labels = [None] * len(queries) if labels is None else list(labels)
    if len(prompts) != len(queries) or len(labels) != len(queries):
        raise InvalidRequest(_MALFORMED, "prompts and labels must be as long as queries (%d)" % len(queries))
    futs = []
    for q, p, lab in zip(queries, prompts, labels):
        e = {"solution_str": _solution(q, p)}
        if lab is not None:
            e["ground_truth"] = lab if isinstance(lab, (str, int, float)) else json.dumps(lab)
        if data_source is not None:
            e["data_source"] = data_source
        futs.append(service.submit("text", q, e))
    out = [f.result() for f in futs]
    rewards = [s for s, _ in out]
    names = sorted(out[0][1]) if out else []
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {n: [c.get(n, float("nan")) for _, c in out] for n in names}}


def reward_func(queries, prompts, labels, **kwargs):
    """OpenRLHF's reward function: lists of equal length -> {"rewards", "scores", "extra_logs"}."""
    return get_reward(_service(), queries, prompts, labels, os.environ.get("VERL_REWARD_DATA_SOURCE") or None)
