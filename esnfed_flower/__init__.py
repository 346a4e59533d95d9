"""Flower adapter layer: IncFed and FedIP as Flower ServerApp/ClientApp built on
esnfed_core. Clients compute with the core, the server aggregates with the core's functions; only
this package imports flwr (docs/flower-apps.md, "Flower apps")."""
