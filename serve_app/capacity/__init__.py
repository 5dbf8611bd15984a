"""Capacity planning and placement checks for GPU profiles (``horizon plan``, ``horizon kuberay``).

Modules: ``facts`` (model facts as data), ``nodes`` (which node type a replica can land on),
``planner`` (memory arithmetic, replica suggestions and the placement checks ``serve run``
runs too), ``report`` (the table), ``commands`` and ``kuberay`` (CLI commands and manifests).
Submodules are imported explicitly; this package imports nothing so that
``deployments.placement`` can use ``nodes`` without a cycle.
"""
