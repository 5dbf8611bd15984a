"""Capacity planning and placement checks for GPU profiles (``horizon plan``, ``horizon kuberay``).

Modules: ``facts`` (model facts as data), ``nodes`` (which node type a replica can land on),
``planner`` (memory arithmetic, replica suggestions and the placement checks ``serve run``
runs too), ``report`` (the table), ``commands`` and ``kuberay`` (CLI commands and manifests).
``machine`` checks a profile without a cluster against the machine ``horizon serve`` starts it
on. What one replica of each kind of deployment asks Ray for is its backend's fact
(``serve_app.fleet.backends``); this package plans with those facts. Submodules are imported
explicitly.
"""
