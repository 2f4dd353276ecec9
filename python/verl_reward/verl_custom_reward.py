"""File for verl's `custom_reward_function.path` (verl loads it by file path with
importlib.util.spec_from_file_location, outside any package, so it imports the
installed verl_reward absolutely). Print its path with

    python3 -c "import verl_reward.verl_custom_reward as m; print(m.__file__)"

Names verl can be given as custom_reward_function.name:
  compute_score        one function for every verl version: the batch form
                       (reward_manager=batch: data_sources=, solution_strs=, ...) -> list[float]
                       or the per-sample form (naive managers and the reward loop:
                       data_source=, solution_str=, ...) -> float, told apart by keywords;
  compute_score_async  the per-sample form as a coroutine function (verl >= 0.7.0 awaits it).
Both batch concurrent per-sample calls into few server requests.

Importing this file also registers verl_reward's managers under the name "verl_reward"
in the registries the installed verl has (legacy reward managers, verl >= 0.5; the reward
loop, verl >= 0.7.0): verl loads this file before it looks the manager name up, in the
driver and in every reward-loop worker. docs/operations.md has the configuration per
verl version. Without verl installed, importing it registers nothing.
"""
from verl_reward.verl_reward_loop import compute_score, compute_score_async, register_with_verl

REGISTERED = register_with_verl("verl_reward")

__all__ = ["compute_score", "compute_score_async"]   # the entry points verl looks up by name
