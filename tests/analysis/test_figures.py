"""Shared figure helpers (tff_meta.analysis.figures): one color and line style per method."""

from tff_meta.analysis import figures


def test_method_colors_are_one_per_name_in_first_seen_order():
  colors = figures.method_colors(['b', 'a', 'b', 'c'])
  assert list(colors) == ['b', 'a', 'c']
  assert len({tuple(c) for c in colors.values()}) == 3


def test_the_eleventh_method_repeats_a_color_with_another_line_style():
  names = [f'm{i}' for i in range(11)]
  colors, styles = figures.method_colors(names), figures.method_linestyles(names)
  assert colors['m10'] == colors['m0']
  assert styles['m0'] == '-' and styles['m10'] == '--'
  assert len({(tuple(colors[n]), styles[n]) for n in names}) == 11
