"""Node-pressure eviction (upstream ``pkg/kubelet/eviction``).

``thresholds`` (pure: parse evictionHard/Soft, thresholds met, grace periods, node conditions with
the transition period), ``ranking`` (pure: which pod goes first, the upstream messages, local
ephemeral-storage limits) and ``manager`` (the periodic pass that observes, decides, reclaims
node-level resources and evicts one pod; also the eviction admission handler and the node's pressure
conditions). See docs/resources.md.
"""

from .manager import (
    EvictionConfig,
    EvictionManager,
    EvictionResult,
    PodEvictor,
    SummaryProvider,
    eviction_config,
)
from .thresholds import Observation, Signal, Threshold, ThresholdError, parse_thresholds

__all__ = [
    "EvictionConfig",
    "EvictionManager",
    "EvictionResult",
    "Observation",
    "PodEvictor",
    "Signal",
    "SummaryProvider",
    "Threshold",
    "ThresholdError",
    "eviction_config",
    "parse_thresholds",
]
