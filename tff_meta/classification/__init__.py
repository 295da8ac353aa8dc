"""The classification task: clients with support and query sets, trained by an `algorithms`
entry (FedMeta, "Federated Meta-Learning with Fast Convergence and Efficient Communication",
arXiv:1802.07876, Sec. 4; FedEC; the report's protocol).

- `config`: the config dataclass and its checks;
- `experiment`: data, model and algorithm from a config, and one run;
- `training_loop`, `round_evaluation`: the rounds through `core.loop`, and evaluation;
- `client_states`: the per-client state store of stateful algorithms;
- `privacy`, `accounting`: DP and secure aggregation, and the privacy accountant;
- `reevaluation`: a finished run's saved state scored with other evaluation settings.
"""
