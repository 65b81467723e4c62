"""The planner: does a fleet fit its GPUs, with which gpu_memory_utilization per replica, and why.

``plan_fleet`` is what ``llmgw-plan`` (``workers.planner.cli:main``) prints, what the supervisor uses for
budgets left ``auto`` (``workers.planner.budgets``) and what ``llmgw-render`` writes into deployment files.
"""

from workers.planner.memory import DEFAULT_RESERVE_BYTES, RuntimeProfile
from workers.planner.model_shape import ConfigLoader, ModelShape, make_config_loader, shape_from_config
from workers.planner.plan import plan_fleet
from workers.planner.result import DEFAULT_TARGET, DevicePlan, Plan, ReplicaPlan

__all__ = [
    "DEFAULT_RESERVE_BYTES",
    "DEFAULT_TARGET",
    "ConfigLoader",
    "DevicePlan",
    "ModelShape",
    "Plan",
    "ReplicaPlan",
    "RuntimeProfile",
    "make_config_loader",
    "plan_fleet",
    "shape_from_config",
]
