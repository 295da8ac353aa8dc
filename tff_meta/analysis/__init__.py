"""Offline analysis of finished run folders: tables, figures and reports.

No TensorFlow or TFF: these modules read the files a run leaves
(`tff_meta.core.run_folder`) and write Markdown, CSV and PNG.

- `tables`: the one-row-per-run summary table (the Markdown writer is `core.tables`);
- `groups`: runs grouped by setting and method (seeds, variants) and their
  statistics, with FedMeta's target accuracies (Fig. 3);
- `figures`: convergence curves (FedMeta Fig. 2, top rows), the per-client
  accuracy density (Fig. 2, bottom row) and the cost to a target (Fig. 3);
- `report`: `build_report`, the whole report that `programs.report` writes.
- `fewround_report`: few-round runs across seeds (Park et al. Tables 1 and 3
  with error bars), what `programs.report` writes.
"""
