"""File for verl's `custom_reward_function.path` (verl loads it by file path with
importlib.util.spec_from_file_location, outside any package, so it imports the
installed verl_reward absolutely):

    custom_reward_function:
      path: <output of: python3 -c "import verl_reward.verl_custom_reward as m; print(m.__file__)">
      name: compute_score
      reward_kwargs: {shm_name: verl_reward_shm}

compute_score is verl_reward.verl_adapter.compute_score (see its docstring).
"""
from verl_reward.verl_adapter import compute_score

__all__ = ["compute_score"]   # the entry point verl looks up by name
