"""The fleet: how the gateway reaches its model deployments (clients over Serve handles,
deployment names, which deployments are up)."""
