"""Each federated method's round, written once and run by both drivers (``fedgca.simulation``, ``fedgca.flower``).

``base``: what a method is (``FederatedMethod``, ``Step``, ``Reply``, ``ClientWork``) and how one is added
(``register``); one module per family of methods: ``alone`` (Single-Client, Centralized), ``sharing`` (FedAvg,
FedProx, FedNova, DP-FedAvg, DP-SGD-FedAvg), ``gca`` (GCA, DP-GCA); ``registry``: the run's method
(``method_for``).
"""
from fedgca.algorithms.base import (
    ClientWork,
    FederatedMethod,
    Reply,
    Step,
    implements,
    register,
)
from fedgca.algorithms.registry import later_step_names, method_class, method_for

__all__ = ["ClientWork", "FederatedMethod", "Reply", "Step", "implements", "later_step_names", "method_class",
           "method_for", "register"]
