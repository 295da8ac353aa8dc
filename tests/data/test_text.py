"""Tests for tff_meta.data.text (character vocabulary, Sent140 words, GloVe)."""

import numpy as np
import pytest

from tff_meta.data import text
from tff_meta.data.types import DataError


def test_char_vocabulary_is_leafs_80_letters_shifted_by_one():
  assert len(text.ALL_LETTERS) == 80
  assert len(set(text.ALL_LETTERS)) == 80
  assert text.NUM_CHAR_CLASSES == 81
  ids = text.encode_chars(text.ALL_LETTERS)
  assert ids.dtype == np.int32
  np.testing.assert_array_equal(ids, np.arange(1, 81))
  assert text.encode_chars('\n')[0] == 1  # LEAF index 0 -> id 1.
  assert text.encode_chars('}')[0] == 80


def test_encode_unknown_char_is_pad_and_decode_round_trips():
  ids = text.encode_chars('Ab~c')
  assert ids[2] == text.CHAR_PAD_ID == 0
  assert text.decode_chars(ids) == 'Abc'
  line = 'To be, or not'
  assert text.decode_chars(text.encode_chars(line)) == line
  assert text.encode_chars('').shape == (0,)


def test_char_windows_stride_one_like_leaf():
  s = 'abcdefghij'
  x, y = text.char_windows(text.encode_chars(s), seq_length=4)
  assert x.shape == (6, 4) and y.shape == (6,)
  for i in range(6):
    assert text.decode_chars(x[i]) == s[i:i + 4]
    assert text.decode_chars([y[i]]) == s[i + 4]
  x2, y2 = text.char_windows(text.encode_chars(s), seq_length=4, stride=4)
  np.testing.assert_array_equal(x2, x[::4])
  np.testing.assert_array_equal(y2, y[::4])


def test_char_windows_short_text_left_padded_and_tiny_text_dropped():
  x, y = text.char_windows(text.encode_chars('abc'), seq_length=5)
  np.testing.assert_array_equal(x, [[0, 0, 0] + list(text.encode_chars('ab'))])
  np.testing.assert_array_equal(y, text.encode_chars('c'))
  x, y = text.char_windows(text.encode_chars('abcdef'), seq_length=5)
  assert x.shape == (1, 5) and text.decode_chars(y) == 'f'
  for tiny in ('a', ''):
    x, y = text.char_windows(text.encode_chars(tiny), seq_length=5)
    assert x.shape == (0, 5) and y.shape == (0,)


def test_tokenize_tweet():
  assert text.tokenize_tweet("@Bob: it's SO good!!  #happy :-)") == [
      'bob', 'it', 's', 'so', 'good', 'happy']
  assert text.tokenize_tweet('  ...  ') == []


def test_build_vocab_orders_by_frequency_then_word_and_caps_size():
  vocab = text.build_vocab([['b', 'a', 'c'], ['c', 'b'], ['c']])
  assert vocab == {'c': 2, 'b': 3, 'a': 4}
  assert text.build_vocab([['b', 'a', 'c'], ['c', 'b'], ['c']],
                          max_size=2) == {'c': 2, 'b': 3}


def test_words_to_ids_pads_truncates_and_marks_unknown():
  vocab = {'good': 2, 'day': 3}
  ids = text.words_to_ids(['good', 'bad', 'day'], vocab)
  assert ids.dtype == np.int32 and ids.shape == (25,)
  np.testing.assert_array_equal(ids[:4], [2, 1, 3, 0])
  assert not ids[3:].any()
  long = text.words_to_ids(['day'] * 30 + ['good'], vocab, length=25)
  np.testing.assert_array_equal(long, [3] * 25)


def _write(path, lines):
  path.write_text(''.join(l + '\n' for l in lines), encoding='utf-8')
  return str(path)


def test_load_glove_builds_matrix_for_vocab(tmp_path):
  f = _write(tmp_path / 'g.txt', ['the 0.1 0.2 0.3', 'cat 1 2 3',
                                  'dog -1 -2 -3', 'cat 9 9 9'])
  m = text.load_glove(f, {'cat': 2, 'zebra': 3, 'the': 4})
  assert m.shape == (5, 3) and m.dtype == np.float32
  np.testing.assert_allclose(m[2], [1, 2, 3])  # First occurrence wins.
  np.testing.assert_allclose(m[4], [0.1, 0.2, 0.3])
  assert not m[[0, 1, 3]].any()  # pad, unknown, word missing from GloVe.


def test_glove_vocab_keeps_file_order(tmp_path):
  f = _write(tmp_path / 'g.txt', ['the 0.1 0.2', 'cat 1 2', 'dog 3 4'])
  vocab, m = text.glove_vocab(f)
  assert vocab == {'the': 2, 'cat': 3, 'dog': 4}
  np.testing.assert_allclose(m, [[0, 0], [0, 0], [0.1, 0.2], [1, 2], [3, 4]])
  vocab, m = text.glove_vocab(f, max_size=1)
  assert vocab == {'the': 2} and m.shape == (3, 2)


@pytest.mark.parametrize('bad_line, problem', [
    ('dog 1 x 3', 'not a float'),
    ('dog 1 2', 'expected 3 floats'),
    ('dog', 'expected a word followed by floats'),
])
def test_load_glove_malformed_line_names_file_and_line(tmp_path, bad_line,
                                                       problem):
  f = _write(tmp_path / 'glove.txt', ['the 0.1 0.2 0.3', 'cat 1 2 3',
                                      bad_line])
  with pytest.raises(DataError) as e:
    text.load_glove(f, {'cat': 2})
  assert 'glove.txt' in str(e.value)
  assert 'line 3' in str(e.value)
  assert problem in str(e.value)


def test_load_glove_missing_or_empty_file(tmp_path):
  with pytest.raises(DataError, match='nope.txt'):
    text.load_glove(str(tmp_path / 'nope.txt'), {})
  with pytest.raises(DataError, match='empty'):
    text.load_glove(_write(tmp_path / 'empty.txt', []), {})
