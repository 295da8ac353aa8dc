"""Few-round learning (Park et al., `../shared/papers/001_*.txt`): meta-train an
initial model so that R rounds of federated learning suffice on unseen tasks."""
