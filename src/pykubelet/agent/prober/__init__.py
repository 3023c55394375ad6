"""Container probes (liveness, readiness, startup) like upstream pkg/kubelet/prober.

``ProbeManager`` runs one asyncio task per probe and caches results per container id; see
manager.py for the engine-facing API and probes.py for the four probe mechanisms.
"""

from pykubelet.agent.prober.manager import KillDecision, ProbeManager, Worker, first_delay
from pykubelet.agent.prober.probes import ProbeError, Prober, resolve_port
from pykubelet.agent.prober.results import Outcome, ProbeState, ProbeType, Result

__all__ = ["KillDecision", "Outcome", "ProbeError", "ProbeManager", "ProbeState", "ProbeType", "Prober",
           "Result", "Worker", "first_delay", "resolve_port"]
