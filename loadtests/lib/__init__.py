"""Locust-free building blocks of the load tests (importable without gevent's monkey-patching).

``locustfile.py`` runs inside locust's gevent world; the runner, the benchmark and the unit
tests import only this package, never locust, so Ray or asyncio code in the same process is
never monkey-patched.
"""
