"""Algorithms of esnfed as plain functions over numpy arrays: reservoir, readout, federation,
plasticity, continual learning, metrics and dataset formats. No CLI, no DVC, no printing.

Comments cite the protocol as "PROTOCOL §n": section n of docs/protocol.md."""

__version__ = "0.1.0"
