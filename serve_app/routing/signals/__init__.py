"""One module per signal type; every signal implements signals.base.Signal."""
