"""Queue-depth autoscaling of model deployments (Ray Serve custom policy) and its options.

* :mod:`.options` — ``scaling_options(model)`` / ``autoscaling_config(model)``: the Serve
  options of a deployment, every autoscaling target set explicitly.
* :mod:`.policy` — the policy Ray Serve runs on the controller.
* :mod:`.signals` — the queue signal read from Ray's AutoscalingContext.
* ``deployments.engine_stats`` — ``engine_autoscaling_stats``, the replica-side custom metrics.
* :mod:`.schedule` — scheduled minimum replicas (daily UTC windows).
"""
