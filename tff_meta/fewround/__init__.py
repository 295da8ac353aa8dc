"""Few-round learning (Park et al., "Few-Round Learning for Federated Learning"): meta-train an
initial model so that R rounds of federated learning suffice on unseen tasks."""
