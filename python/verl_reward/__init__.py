"""verl_reward: Python client of verl-reward-server (standard library only).

    from verl_reward import RewardClient
    with RewardClient("verl_reward_shm") as rc:           # shared memory, same host
        scores = rc.score([[1, 2, 3], [4, 5]])

    from verl_reward import HttpRewardClient
    scores = HttpRewardClient("http://rm-host:8700").score([[1, 2, 3]])

RewardClient(..., tokenizer="/models/rm").score_text / score_messages tokenise texts and
conversations here with the reward model's tokenizer (verl_reward.text: libverl_reward_text.so,
no transformers needed) and send the ids over shared memory.

RewardClient wraps libverl_reward_client.so through ctypes (found via
$VERL_REWARD_LIB, next to this package, or the system path); HttpRewardClient
needs no library. Both have score_async() for coroutines.

Framework drop-ins (docs/operations.md has the configuration of each):
  verl_reward.verl_reward_loop     verl >= 0.7 reward loop (VerlRewardLoopManager), per-sample
                                   compute_score / compute_score_async, register_with_verl
  verl_reward.verl_adapter         verl 0.4-0.6 (batch compute_score, VerlRewardManager)
  verl_reward.verl_custom_reward   the file for verl's custom_reward_function.path
  verl_reward.openrlhf_bridge      tokenizing HTTP front for the server's own framework routes
  verl_reward.openrlhf_reward_func the file for OpenRLHF's --reward.remote_url
  verl_reward.trl                  VerlRewardFunction for TRL's GRPOTrainer
  verl_reward.batcher, .service    the micro-batcher they share
"""

from .client import PendingScore, RewardClient, ScoreResult
from .errors import (
    Busy,
    ConnectFailed,
    InvalidRequest,
    SequenceFormError,
    NoLane,
    Overloaded,
    RequestTooLarge,
    SequenceTooLong,
    ServerError,
    ServerGone,
    ServerRestarted,
    ShuttingDown,
    Timeout,
    VerlRewardError,
    error_for,
)
from .http import HttpPendingScore, HttpRewardClient
from ._lib import LibraryNotFound, load_library
from ._batch import PackedSequences, pack_padded
from .text import RmTokenizer, TextLibraryNotFound

__version__ = "0.1.0"

__all__ = [
    "RewardClient", "HttpRewardClient", "PendingScore", "HttpPendingScore", "ScoreResult",
    "VerlRewardError", "InvalidRequest", "SequenceFormError", "RequestTooLarge", "SequenceTooLong", "Timeout",
    "ServerGone", "ServerRestarted", "ShuttingDown", "Overloaded", "Busy", "NoLane",
    "ConnectFailed", "ServerError", "LibraryNotFound", "error_for", "load_library",
    "PackedSequences", "pack_padded", "RmTokenizer", "TextLibraryNotFound",
]
