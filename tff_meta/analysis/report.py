"""The report over finished run folders that `programs.report` writes.

`build_report` reads every run folder under the given roots
(`run_folder.find_run_folders`, `run_folder.load_run`), groups them
(`groups.group_runs`) and writes into one folder:

- report.md / report.csv: accuracy as mean ± std over seeds, methods ×
  settings (FedMeta Table 2's layout), and per setting the client mean, the
  worst 10% of clients and the rounds, MB and GFLOPs to the target (Fig. 3);
- fairness.md: percentiles of the final per-client accuracy (Fig. 2, bottom
  row, in numbers);
- the figures of `analysis.figures`: convergence_rounds.png,
  convergence_bytes.png, fairness.png, and cost.png when some method reaches
  its target.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from tff_meta.core import provenance
from tff_meta.analysis import figures, paper_table
from tff_meta.analysis.groups import (REFERENCE_ALGORITHM, Group, add_cost_ratios,
                                      add_paired_differences, fairness_rows, group_runs,
                                      group_stats, late_gain_row, method_key, parse_targets,
                                      target_for)
from tff_meta.analysis.tables import paired_cell
from tff_meta.core.tables import markdown_table, mean_pm_std, pct, pct_label, write_csv
from tff_meta.evaluation import fairness
from tff_meta.core.files import write_text
from tff_meta.core.run_folder import (CONFIG_FILE, RESULTS_FILE, RunFolderError, find_run_folders,
                                 load_run)

def _cost_cells(row: Dict[str, Any]) -> List[str]:
  """Rounds, MB and GFLOPs to the target: value (mean ± std over the runs that reached it)."""
  if row.get('target') is None:
    return ['—', '—', '—']
  k, n = row['reached'], row['runs']
  if k == 0:
    return ['not reached'] * 3
  part = '' if k == n else f' ({k}/{n} runs)'
  cells = [mean_pm_std(row['rounds_to_target'], row['rounds_to_target_std'], k) + part,
           mean_pm_std(row['mb_to_target'], row['mb_to_target_std'], k) + part]
  cells.append(mean_pm_std(row['gflops_to_target'], row['gflops_to_target_std'], k) + part
               if 'gflops_to_target' in row else 'n/a')
  return cells


def _ratio_cell(row: Dict[str, Any]) -> str:
  if 'fedavg_mb_ratio' not in row:
    return '—'
  flops = row.get('fedavg_gflops_ratio')
  return f"{row['fedavg_mb_ratio']:.2f} / " + (f'{flops:.2f}' if flops is not None else 'n/a')


def _setting_table(rows: Sequence[Dict[str, Any]], target: Optional[float],
                   reference: str) -> str:
  t = pct_label(target)
  header = ['Method', 'Runs', 'Accuracy % (mean ± std)', 'Client mean %', 'Worst 10% of clients %',
            f'vs {reference}, per client (95% CI)', 'Rounds', f'Rounds to {t}', f'MB to {t}',
            f'GFLOPs to {t}', f"FedAvg's MB / GFLOPs to {t} ÷ this"]
  body = [[r['method'], str(r['runs']), f"{pct(r['accuracy'])} ± {pct(r['accuracy_std'])}",
           pct(r['client_mean']), pct(r['worst10']), paired_cell(r), str(r['rounds']),
           *_cost_cells(r), _ratio_cell(r)]
          for r in rows]
  return markdown_table(header, body)


def _late_gain_table(groups: Sequence[Group]) -> Optional[str]:
  rows = [r for r in (late_gain_row(g) for g in groups) if r is not None]
  if not rows:
    return None
  return markdown_table(
      ['Method', 'Runs', 'Validation accuracy %, last quarter of rounds',
       'Gain over the quarter before, points'],
      [[r['method'], str(r['runs']), f"{pct(r['last_quarter'])} ± {pct(r['last_quarter_std'])}",
        f"{r['late_gain']:+.2f} ± {r['late_gain_std']:.2f}"] for r in rows])


def _pivot_table(groups: Sequence[Group], rows: Sequence[Dict[str, Any]]) -> str:
  settings = sorted({g.setting for g in groups})
  methods: List[str] = []
  order = sorted(zip(groups, rows), key=lambda gr: (method_key(gr[0].algorithm), gr[0].method))
  for g, _ in order:
    if g.method not in methods:
      methods.append(g.method)
  cell = {(g.method, g.setting): f"{pct(r['accuracy'])} ± {pct(r['accuracy_std'])} ({r['runs']})"
          for g, r in zip(groups, rows)}
  return markdown_table(['Method', *[s.label for s in settings]],
                        [[m, *[cell.get((m, s), '—') for s in settings]] for m in methods])


def _fairness_md(groups: Sequence[Group], frows: Sequence[Dict[str, Any]]) -> str:
  lines = ['# Fairness: final per-client test accuracy', '',
           'Each test client\'s accuracy on its query set after the last round, pooled over the '
           'runs (seeds) of each method, in percent. Std is over clients (ddof=0); percentiles '
           'interpolate linearly; "worst 10%" is the mean of the lowest ceil(10% of clients) '
           'accuracies. `fairness.png` shows the kernel density of the same values '
           '(FedMeta Fig. 2, bottom row).', '']
  qs = fairness.PERCENTILES
  header = ['Method', 'Runs', 'Clients', 'Mean', 'Std', *[f'P{q}' for q in qs],
            'Worst 10% (clients)', 'Min', 'Max']
  for setting in sorted({g.setting for g in groups}):
    body = [[r['method'], str(r['runs']), str(r['num_clients']), pct(r['mean']), pct(r['std']),
             *[pct(r[f'p{q}']) for q in qs], f"{pct(r['worst_mean'])} ({r['worst_count']})",
             pct(r['min']), pct(r['max'])]
            for g, r in zip(groups, frows) if g.setting == setting]
    lines += [f'## {setting.label}', '', markdown_table(header, body), '']
  return '\n'.join(lines)


def build_report(roots: Sequence[str], output_dir: str, target_accuracy: str = '',
                 reference: Optional[str] = None) -> Dict[str, Any]:
  """Reads the run folders under `roots` and writes the report into `output_dir`.

  `reference` is the algorithm the paired column subtracts: None is FedAvg, the
  paper's baseline, when there is a FedAvg run (else the column stays empty); a
  named one must have finished runs. The cost ratios always divide FedAvg's
  cost (Fig. 3).

  Returns {'files': [paths written], 'rows': table rows, 'groups': groups,
  'unfinished': folders left out, 'notes': [...], 'markdown': report.md's text}.
  """
  targets_flag = parse_targets(target_accuracy)
  folders, unfinished = find_run_folders(roots)
  if not folders:
    raise RunFolderError(f'no run folders (a folder holding {RESULTS_FILE} and {CONFIG_FILE}) '
                      f'under {", ".join(roots)}'
                      + (f'; unfinished (no {RESULTS_FILE}): {", ".join(unfinished)}'
                         if unfinished else ''))
  runs = [load_run(f) for f in folders]
  groups, notes = group_runs(runs)
  targets = {s: target_for(s, targets_flag) for s in {g.setting for g in groups}}
  rows = [group_stats(g, targets[g.setting]) for g in groups]
  found = [g.method.partition(' [')[0] for g in groups
           if g.algorithm == (reference or REFERENCE_ALGORITHM)]
  if reference is not None and not found:
    raise RunFolderError(f'--reference={reference}: no finished run of that algorithm under '
                         f'{", ".join(roots)}; use one of '
                         f'{", ".join(sorted({g.algorithm for g in groups}))}')
  reference = reference or REFERENCE_ALGORITHM
  reference_name = found[0] if found else 'FedAvg'
  add_paired_differences(groups, rows, reference)
  add_cost_ratios(groups, rows)
  frows = fairness_rows(groups)
  os.makedirs(output_dir, exist_ok=True)
  files = []

  def out(name):
    path = os.path.join(output_dir, name)
    files.append(path)
    return path

  figures.plot_report_convergence(groups, out('convergence_rounds.png'), 'rounds', targets)
  figures.plot_report_convergence(groups, out('convergence_bytes.png'), 'mb', targets)
  figures.plot_fairness(groups, out('fairness.png'))
  has_cost = figures.plot_cost(groups, rows, os.path.join(output_dir, 'cost.png'))
  if has_cost:
    files.append(os.path.join(output_dir, 'cost.png'))
  elif os.path.exists(os.path.join(output_dir, 'cost.png')):
    os.remove(os.path.join(output_dir, 'cost.png'))   # a stale plot from an earlier report
  write_text(out('fairness.md'), _fairness_md(groups, frows))
  write_csv(rows, out('report.csv'))

  no_flops = any(r.get('reached') and 'gflops_to_target' not in r for r in rows)
  md = ['# Results report', '',
        f'{len(runs)} run folder(s) under {", ".join(roots)}: '
        f'{len({g.method for g in groups})} method(s) × {len(targets)} setting(s) '
        '(dataset, model, support fraction p). Written by `python -m programs.report`.', '',
        'Accuracy is over all query points of the test clients after the last round, in percent: '
        'the mean ± sample std (ddof = 1) over the runs (seeds) of a cell. '
        '"Client mean" is the mean per-client accuracy and "worst 10%" the mean of the lowest '
        'ceil(10%) of clients, over the clients of all runs pooled (as in `fairness.md`). '
        'The cost columns are cumulative over '
        'rounds up to the first evaluation whose test accuracy reaches the target: MB sent down '
        'and up by all sampled clients, and their GFLOPs (`client_flops` in metrics.csv), '
        f'averaged over the runs that reach it. "vs {reference_name}" is the method\'s final '
        f'accuracy minus {reference_name}\'s on each test client of the same seed (the same '
        'client and query set), '
        'in points, pooled over the seeds both ran: the mean and its 95% CI (Student\'s t). The '
        'last column divides FedAvg\'s MB and GFLOPs to the target by the method\'s (above 1: '
        'the method needs less; FedMeta reports 2.82-4.33 times fewer bytes).', '',
        '## Accuracy % (methods × settings; runs in parentheses)', '',
        _pivot_table(groups, rows), '']
  beside_paper = paper_table.table(groups, rows)
  if beside_paper is not None:
    md += ['## Beside FedMeta Table 2', '', paper_table.EXPLANATION, '', beside_paper, '']
  for setting in sorted(targets):
    t = targets[setting]
    source = ('--target_accuracy' if setting.dataset in targets_flag or None in targets_flag
              else 'FedMeta Fig. 3' if t is not None else None)
    md += [f'## {setting.label}', '',
           (f'Target accuracy {100 * t:g}% (from {source}).' if t is not None else
            f'No target accuracy for {setting.dataset}: pass --target_accuracy=0.xx '
            f'(or {setting.dataset}=0.xx) for the cost columns.'), '',
           _setting_table([r for g, r in zip(groups, rows) if g.setting == setting], t,
                          reference_name), '']
    late = _late_gain_table([g for g in groups if g.setting == setting])
    if late is not None:
      md += [f'### Still rising at the last round? ({setting.label})', '',
             'Mean validation accuracy over the evaluations in the last quarter of the '
             'rounds, and its gain over the quarter before (mean ± std over runs): about 0 '
             'for a method that has converged, above 0 for one that more rounds would '
             'still improve.', '', late, '']
  if no_flops:
    md += ['"n/a": metrics.csv of these runs has no `client_flops` column.', '']
  md += ['## Figures', '',
         '- `convergence_rounds.png`: test accuracy against rounds, mean over runs.',
         '- `convergence_bytes.png`: test accuracy against cumulative MB sent (down + up).',
         '- `fairness.png`: kernel density of the final per-client accuracy '
         '(FedMeta Fig. 2, bottom row); the numbers are in `fairness.md`.']
  if has_cost:
    md.append('- `cost.png`: MB and GFLOPs to reach the target accuracy (FedMeta Fig. 3).')
  else:
    md.append('- no `cost.png`: no method reached a target accuracy.')
  md += ['', '![accuracy against rounds](convergence_rounds.png)', '',
         '![accuracy against MB](convergence_bytes.png)', '', '![fairness](fairness.png)', '']
  if has_cost:
    md += ['![cost to target](cost.png)', '']
  md += ['## Runs', '']
  md += [f'- {g.method}, {g.setting.label}: '
         + ', '.join(f'{r.path} (seed {r.seed}, {provenance.describe(r.path)})'
                     for r in g.runs) for g in groups]
  if unfinished or notes:
    md += ['', '## Notes', '']
    md += [f'- left out, unfinished (no {RESULTS_FILE}): {u}' for u in unfinished]
    md += [f'- {n}' for n in notes]
  text = '\n'.join(md) + '\n'
  write_text(out('report.md'), text)
  return dict(files=files, rows=rows, groups=groups, unfinished=unfinished, notes=notes,
              markdown=text)
