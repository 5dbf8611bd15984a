"""Shared test doubles: one fake fleet for every layer (used in-process, never a stand-in for a
real engine in e2e tests)."""
