"""Federated meta-learning for recommendation (Chen et al. 2018b; FedMeta Sec. 4.3).

- `features`: deterministic MovieLens encoders.
- `metrics`: RMSE, Precision@k, Top-k accuracy.
- `tasks`: users as tasks, the 80/20 user split and chronological episodes.
- `evaluation`: the TFF computation that adapts on support sets and predicts queries.
- `training`: plain-TF step training for the non-federated baselines.
- `baselines`: SVD++ (scikit-surprise), the bias baseline, MFU, MRU, naive Bayes.
- `calibration`: the baselines on a MovieLens-shaped folder, beside ml-100k's.
- `precision_ceiling`: Precision@k of rankings without a network (genre tastes, ALS item
  factors, the generator's latents): what the inputs allow.
- `event_log`: per-user event logs (CSV/Parquet), checks, a realistic generator.
- `service`: per-user label spaces (<= C), features, the chronological split.
- `methods`: meta-learning (the FedMeta TFF process) and pre-training, as episode loops.
- `loop`: the episode loop (checkpoints, resume, curve, progress).
- `movielens_task`, `service_task`: each task's methods registry and table layout.
- `config`, `experiment`: configs and runs behind `programs/train.py`.
"""
