"""fedgca on Flower (``flwr`` 1.41, Message API).

* ``fedgca.flower.server_app:app`` / ``fedgca.flower.client_app:app`` — the
  ServerApp and ClientApp (GCA and the parameter-sharing baselines).
* :mod:`fedgca.flower.simulation` — local simulation (in-process engine, or
  Flower's Ray-based Simulation Engine).
* :mod:`fedgca.flower.deploy` — Flower App project, TLS certificates, a local
  SuperLink + SuperNodes harness.
* :mod:`fedgca.flower.owndata` — a practitioner's CSV + schema on a node, with
  federated (no-pooling) preprocessing.

The apps call the same method code as fedgca's simulator
(``fedgca.protocol``, ``fedgca.training``, ``fedgca.seeding``); see
docs/flower.md.
"""
