"""Operator tools that talk to a running endpoint over HTTP: ``horizon smoke`` and ``horizon eval``.

They are clients only (httpx, loopback targets): nothing here starts Ray, Serve or an engine.
"""
