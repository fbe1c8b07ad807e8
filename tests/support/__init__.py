"""Shared test code: policies, tables, fixtures, the sandbox API, the event receiver, seeding.

Importable by every tier and by ``scripts/`` (the demo and benchmarks use the
sandbox API and the seeding code from here).
"""
