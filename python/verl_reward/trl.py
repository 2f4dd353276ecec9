"""TRL: a reward function for GRPOTrainer(reward_funcs=[...]) scored by verl-reward-server.

    from verl_reward.trl import VerlRewardFunction
    rm = VerlRewardFunction(shm_name="verl_reward_shm", tokenizer=policy_tokenizer)    # token ids
    rm = VerlRewardFunction(service_url="http://rm:8080", input="text")             # server tokenises
    rm = VerlRewardFunction(shm_name="verl_reward_shm", input="text", rm_tokenizer="/models/rm")
    trainer = GRPOTrainer(model=..., reward_funcs=[rm], ...)

TRL calls a reward function as f(prompts=, completions=, completion_ids=, **columns)
(trl/trainer/grpo_trainer.py, GRPOTrainer._calculate_rewards, v1.9.0; columns: the
dataset's other fields, plus trainer_state, log_extra, log_metric) and takes back one
float per completion. Prompts and completions are strings, or lists of chat messages in
conversational datasets.

input="ids" (policy and reward model share a tokenizer): the sequence is the prompt's
ids (the prompt rendered as TRL renders it: tokenizer.apply_chat_template(prompt,
add_generation_prompt=True, tokenize=False) for conversations, then encoded without
special tokens) followed by completion_ids. input="text" (the reward model's own
tokenizer, as TRL scores a model given as reward function): prompt + completion as
text, conversations through the RM's chat template; tokenised with rm_tokenizer here
(shared memory) or sent as {"text"} / {"messages"} to the server (service_url without
rm_tokenizer; rm_tokenizer_dir instead: the project's own tokenizer, verl_reward.text). ground_truth_key names a dataset column whose value goes to the server's
rule components as ground_truth (default "ground_truth" when present); data_source_key
likewise. The object's __name__ ("verl_reward" unless given) names it in TRL's logs.
"""

from .errors import STATUS_VALUES, InvalidRequest
from .service import RewardService, load_tokenizer, rm_tokenizer_from

_INVAL = STATUS_VALUES["VR_ERR_INVAL"]


def _is_conversation(x):
    return isinstance(x, list) and (not x or isinstance(x[0], dict))


class VerlRewardFunction:
    def __init__(self, shm_name=None, service_url=None, input="ids", tokenizer=None, rm_tokenizer=None,
                 ground_truth_key="ground_truth", data_source_key="data_source", name="verl_reward",
                 timeout_s=60.0, connect_timeout_s=30.0, rm_tokenizer_dir=None):
        if input not in ("ids", "text"):
            raise ValueError("input must be \"ids\" or \"text\", got %r" % (input,))
        self.input = input
        self.tokenizer = tokenizer
        self.ground_truth_key = ground_truth_key
        self.data_source_key = data_source_key
        self.__name__ = name
        self.service = RewardService.get(shm_name=shm_name, service_url=service_url,
                                         rm_tokenizer=rm_tokenizer_from(rm_tokenizer, rm_tokenizer_dir),
                                         timeout_s=timeout_s, connect_timeout_s=connect_timeout_s)

    def _prompt_ids(self, prompt):
        tok = load_tokenizer(self.tokenizer, "tokenizer")
        if tok is None:
            raise InvalidRequest(_INVAL, "VerlRewardFunction(input=\"ids\") needs tokenizer= (the policy's "
                                 "processing class) to turn prompts into ids")
        if _is_conversation(prompt):
            prompt = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        return list(tok.encode(prompt, add_special_tokens=False))

    def _extras(self, n, completions, columns):
        gts = columns.get(self.ground_truth_key) if self.ground_truth_key else None
        srcs = columns.get(self.data_source_key) if self.data_source_key else None
        if gts is None and srcs is None:
            return None
        out = []
        for i in range(n):
            c = completions[i]
            e = {"solution_str": c if isinstance(c, str) else "".join(m.get("content", "") for m in c)}
            if gts is not None:
                g = gts[i]
                e["ground_truth"] = g if isinstance(g, (str, int, float)) or g is None else str(g)
            if srcs is not None:
                e["data_source"] = srcs[i]
            out.append(e)
        return out

    def __call__(self, prompts, completions, completion_ids=None, **columns):
        n = len(completions)
        if len(prompts) != n:
            raise InvalidRequest(_INVAL, "%d prompts for %d completions" % (len(prompts), n))
        extras = self._extras(n, completions, columns)
        if self.input == "ids":
            if completion_ids is None or len(completion_ids) != n:
                raise InvalidRequest(_INVAL, "input=\"ids\" needs completion_ids, one per completion")
            seqs = [self._prompt_ids(p) + [int(t) for t in c] for p, c in zip(prompts, completion_ids)]
            res = self.service.score_batch("ids", seqs, extras)
        elif _is_conversation(prompts[0]):
            res = self.service.score_batch("messages", [list(p) + list(c) for p, c in zip(prompts, completions)],
                                           extras)
        else:
            res = self.service.score_batch("text", [p + c for p, c in zip(prompts, completions)], extras)
        return [float(s) for s in res.scores]
