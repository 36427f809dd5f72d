"""Inference endpoints: a name that routes to replica sessions, scaled on load."""

from .router import Replica, Route, Router
from .scaling import Autoscaler, Load, LoadMeter, Plan, ReplicaState, plan_replicas
from .spec import METRICS, Decision, Endpoint, EndpointSpec, Scaling, parse_endpoint, parse_update

__all__ = [
    "METRICS",
    "Autoscaler",
    "Decision",
    "Endpoint",
    "EndpointSpec",
    "Load",
    "LoadMeter",
    "Plan",
    "Replica",
    "ReplicaState",
    "Route",
    "Router",
    "Scaling",
    "parse_endpoint",
    "parse_update",
    "plan_replicas",
]
