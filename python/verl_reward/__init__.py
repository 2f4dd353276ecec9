"""verl_reward: Python client of verl-reward-server (standard library only).

    from verl_reward import RewardClient
    with RewardClient("verl_reward_shm") as rc:           # shared memory, same host
        scores = rc.score([[1, 2, 3], [4, 5]])

    from verl_reward import HttpRewardClient
    scores = HttpRewardClient("http://rm-host:8700").score([[1, 2, 3]])

RewardClient wraps libverl_reward_client.so through ctypes (found via
$VERL_REWARD_LIB, next to this package, or the system path); HttpRewardClient
needs no library. verl integration: verl_reward.verl_adapter.
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

__version__ = "0.1.0"

__all__ = [
    "RewardClient", "HttpRewardClient", "PendingScore", "HttpPendingScore", "ScoreResult",
    "VerlRewardError", "InvalidRequest", "SequenceFormError", "RequestTooLarge", "SequenceTooLong", "Timeout",
    "ServerGone", "ServerRestarted", "ShuttingDown", "Overloaded", "Busy", "NoLane",
    "ConnectFailed", "ServerError", "LibraryNotFound", "error_for", "load_library",
]
