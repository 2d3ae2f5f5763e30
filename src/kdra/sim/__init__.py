"""Workloads, the discrete-event simulation, metrics and reports."""
