"""Keras builders for the papers' models, registered by name in `MODELS`.

Every builder takes `(element_shape, num_classes, **options)` and returns an
uncompiled `tf.keras.Model` with no layers that update non-trainable state
(no BatchNormalization): the algorithms differentiate through the model as a
pure function of its weights (`tff_meta.models.functional`).

Models (FedMeta paper, Chen et al. 2018, Appendix A.1):
- `femnist_cnn`: two 5x5 convolutions (32, 64 channels), each followed by 2x2
  max pooling, a 2048-unit ReLU dense layer and a softmax output (62 classes).
- `shakespeare_lstm`: an 8-d character embedding, two LSTM layers of 256 units,
  a softmax over characters; input sequences of 80 characters.
- `sent140_lstm`: 25 word ids, 300-d embeddings (GloVe, given as
  `embedding_matrix`, or trained), two LSTM layers of 100 units, 2 classes.
- `mlp` and `logistic_regression`: small models for the embedded digits data.
Models output logits; the losses apply the softmax.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_meta.registry import Registry

MODELS: Registry = Registry('model')


def lstm(units: int, return_sequences: bool = False) -> tf.keras.layers.Layer:
  """An LSTM layer that MAML can differentiate twice, on CPU and GPU.

  A generic `RNN(LSTMCell)` runs as a `tf.while_loop` and never dispatches to
  cuDNN, whose kernels have no second-order gradients (TFF_NOTES). Its
  second-order meta-gradient equals the unrolled LSTM's (tests/models), and
  building it is far cheaper than unrolling 80 steps.
  """
  return tf.keras.layers.RNN(tf.keras.layers.LSTMCell(units), return_sequences=return_sequences)


class FrozenEmbedding(tf.keras.layers.Layer):
  """A fixed embedding table (e.g. GloVe) created as a *non-trainable* weight.

  Keras' `Embedding(trainable=False)` still creates its variable with
  `trainable=True`, so TFF's functional model (which swaps variables for
  tensors by their `trainable` flag) would feed it a trainable tensor.
  """

  def __init__(self, matrix, **kwargs):
    kwargs.pop('trainable', None)
    super().__init__(trainable=False, **kwargs)
    self._matrix = np.asarray(matrix, np.float32)

  def build(self, input_shape):
    self.embeddings = self.add_weight(
        name='embeddings', shape=self._matrix.shape, trainable=False,
        initializer=tf.keras.initializers.Constant(self._matrix))
    super().build(input_shape)

  def call(self, ids):
    return tf.nn.embedding_lookup(self.embeddings, ids)

  def get_config(self):
    return {**super().get_config(), 'matrix': self._matrix}


def _flat_input(element_shape):
  return [tf.keras.layers.InputLayer(input_shape=tuple(element_shape)),
          tf.keras.layers.Flatten()]


@MODELS.register('logistic_regression')
def logistic_regression(element_shape: Sequence[int], num_classes: int) -> tf.keras.Model:
  return tf.keras.Sequential(
      _flat_input(element_shape) + [tf.keras.layers.Dense(num_classes)],
      name='logistic_regression')


@MODELS.register('mlp')
def mlp(element_shape: Sequence[int], num_classes: int,
        hidden_units: Sequence[int] = (64,)) -> tf.keras.Model:
  layers = _flat_input(element_shape)
  for units in hidden_units:
    layers.append(tf.keras.layers.Dense(int(units), activation='relu'))
  layers.append(tf.keras.layers.Dense(num_classes))
  return tf.keras.Sequential(layers, name='mlp')


@MODELS.register('femnist_cnn')
def femnist_cnn(element_shape: Sequence[int] = (28, 28), num_classes: int = 62,
                dense_units: int = 2048) -> tf.keras.Model:
  """FedMeta Appendix A.1 CNN (6.6M parameters with 62 classes)."""
  side = int(round(np.sqrt(np.prod(element_shape))))
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=tuple(element_shape)),
      tf.keras.layers.Reshape((side, side, 1)),
      tf.keras.layers.Conv2D(32, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Conv2D(64, 5, padding='same', activation='relu'),
      tf.keras.layers.MaxPool2D(2),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(dense_units, activation='relu'),
      tf.keras.layers.Dense(num_classes),
  ], name='femnist_cnn')


@MODELS.register('shakespeare_lstm')
def shakespeare_lstm(element_shape: Sequence[int] = (80,), num_classes: int = 81,
                     embedding_dim: int = 8, units: int = 256) -> tf.keras.Model:
  """FedMeta Appendix A.1 character LSTM: 8-d embedding, 2 x LSTM(256)."""
  seq_len = int(element_shape[0])
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(seq_len,), dtype=tf.int32),
      tf.keras.layers.Embedding(num_classes, embedding_dim),
      lstm(units, return_sequences=True),
      lstm(units),
      tf.keras.layers.Dense(num_classes),
  ], name='shakespeare_lstm')


@MODELS.register('sent140_lstm')
def sent140_lstm(element_shape: Sequence[int] = (25,), num_classes: int = 2,
                 vocab_size: int = 10000, embedding_dim: int = 300, units: int = 100,
                 embedding_matrix: Optional[np.ndarray] = None) -> tf.keras.Model:
  """FedMeta Appendix A.1 Sent140 classifier: 300-d embeddings, 2 x LSTM(100).

  With `embedding_matrix` (GloVe vectors, [vocab_size, 300]) the embeddings are
  loaded and frozen; otherwise they are trained.
  """
  seq_len = int(element_shape[0])
  if embedding_matrix is not None:
    embedding = FrozenEmbedding(embedding_matrix)
  else:
    embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(seq_len,), dtype=tf.int32),
      embedding,
      lstm(units, return_sequences=True),
      lstm(units),
      tf.keras.layers.Dense(num_classes),
  ], name='sent140_lstm')


@MODELS.register('rating_mlp')
def rating_mlp(element_shape: Sequence[int], num_classes: int = 1, hidden_units: int = 32,
               max_rating: float = 5.0) -> tf.keras.Model:
  """Chen et al. 2018b Sec. 3.1 rating model: one hidden layer (32, ReLU), then a
  sigmoid output scaled to [0, max_rating]; outputs [n, 1] ratings, not logits."""
  del num_classes
  return tf.keras.Sequential(_flat_input(element_shape) + [
      tf.keras.layers.Dense(int(hidden_units), activation='relu'),
      tf.keras.layers.Dense(1, activation='sigmoid'),
      tf.keras.layers.Rescaling(float(max_rating)),
  ], name='rating_mlp')


@MODELS.register('rating_wide_mlp')
def rating_wide_mlp(element_shape: Sequence[int], num_classes: int = 1, hidden_units: int = 32,
                    max_rating: float = 5.0) -> tf.keras.Model:
  """`rating_mlp` plus a linear ("wide") path from the input to the output's pre-sigmoid score:

    rating = max_rating * sigmoid(w . x + b + v . relu(W x + c)).

  Chen et al. 2018b Sec. 3.1 fixes the hidden layer (32) and the sigmoid output scaled to
  [0, 5]; the wide path is our addition (issue #15). With v = 0 the model is the bias
  baseline mu + b_i + b_u up to the sigmoid link: w's weights on the one-hot movie id are
  item biases, the output bias b is the user's bias (a user's own number, which the inner loop
  adapts on the support set), w's other weights linear effects of genres and demographics.
  Its weights start at zero (the deep path starts as in `rating_mlp`).
  """
  del num_classes
  inputs = tf.keras.layers.Input(shape=(int(np.prod(element_shape)),))
  hidden = tf.keras.layers.Dense(int(hidden_units), activation='relu', name='hidden')(inputs)
  deep = tf.keras.layers.Dense(1, use_bias=False, name='deep')(hidden)
  wide = tf.keras.layers.Dense(1, kernel_initializer='zeros', name='wide')(inputs)
  score = tf.keras.layers.Activation('sigmoid')(tf.keras.layers.Add()([deep, wide]))
  return tf.keras.Model(inputs, tf.keras.layers.Rescaling(float(max_rating))(score),
                        name='rating_wide_mlp')


class UserFactor(tf.keras.layers.Layer):
  """The factor term <E x_movie, u> of `rating_factor_mlp`: [n, dim] -> [n, 1].

  x_movie is the input's first `movies` columns (the one-hot movie id,
  `features.MovieLensEncoder`'s first block); `embedding` (E^T, [movies, factors]) holds the
  movies' latent factors, `user` (u, [factors]) the user's taste on them, starting at zero.
  The term is multiplied by `scale` (s): s <E x_movie, u>.
  """

  def __init__(self, movies: int, factors: int, stddev: float, scale: float = 1.0, **kwargs):
    super().__init__(**kwargs)
    self.movies, self.factors, self.stddev = int(movies), int(factors), float(stddev)
    self.scale = float(scale)

  def build(self, input_shape):
    if self.movies < 1 or self.movies > int(input_shape[-1]):
      raise ValueError(f'movies must be in [1, {int(input_shape[-1])}] (the width of the movie '
                       f'one-hot at the start of the input), got {self.movies}.')
    self.embedding = self.add_weight(
        name='embedding', shape=(self.movies, self.factors),
        initializer=tf.keras.initializers.RandomNormal(stddev=self.stddev))
    self.user = self.add_weight(name='user', shape=(self.factors,), initializer='zeros')
    super().build(input_shape)

  def call(self, x):
    item = tf.matmul(x[:, :self.movies], self.embedding)          # E x_movie, [n, factors]
    return self.scale * tf.reduce_sum(item * self.user, axis=-1, keepdims=True)

  def get_config(self):
    return {**super().get_config(), 'movies': self.movies, 'factors': self.factors,
            'stddev': self.stddev, 'scale': self.scale}


# The name of rating_factor_mlp's factor layer (E and u), which warm starts and per-layer
# rates find it by.
FACTOR_LAYER = 'factor'


@MODELS.register('rating_factor_mlp')
def rating_factor_mlp(element_shape: Sequence[int], num_classes: int = 1, hidden_units: int = 32,
                      max_rating: float = 5.0, movies: Optional[int] = None, factors: int = 8,
                      factor_stddev: float = 0.1, factor_scale: float = 1.0) -> tf.keras.Model:
  """`rating_wide_mlp` plus a factor term, the movie's latent factors times the user's taste:

    rating = max_rating * sigmoid(w . x + b + v . relu(W x + c) + s <E x_movie, u>),

  x_movie the one-hot movie id (the input's first `movies` columns), E ([factors, movies], a
  projection of it, i.e. an item embedding, drawn N(0, factor_stddev^2)) and u (a `factors`
  vector, the "user vector", starting at zero, so the untrained model equals `rating_wide_mlp`
  with the same shared weights). Our extension, not Chen et al. 2018b (whose Sec. 3.1 network
  is `rating_mlp`): MAML's inner loop adapts every weight on a user's support set, so it fits
  u, the user's taste, while the meta-update learns E and u's starting point. That is the
  structure of the two-stage model "item factors learned from the training users (ALS, 8
  factors) + a per-user ridge on the support set", which reached 52% Precision@1 and RMSE
  0.862 on generated data where every trained method sat at the item-bias floor
  (docs/RESULTS.md of 3ab6296, 8a', `recommendation.precision_ceiling`; issue #15). The
  layers `hidden`,
  `deep` and `wide` and the output bias (the last weight) are `rating_wide_mlp`'s, so
  `warm_start`'s `bias` start applies unchanged; its `factors` start also sets E to item
  factors learned from the training users (`recommendation.factors`).

  s (`factor_scale`) is a reparametrisation, not more capacity: the model's functions are the
  same for every s > 0 (u' = s u), but an SGD step of rate a moves the term s <E x, u> as a
  step of rate s^2 a on the unscaled u would. So s sets how fast the inner loop fits the
  user's taste relative to the other weights, which share one inner rate (Chen et al. 2018b
  Sec. 3.1: 10 SGD steps). With E at item factors of about 0.3 per coordinate, the inner rate
  that fits the user's bias in a step or two (0.02) moves u by a few percent of its
  least-squares value in 10 steps at s = 1 (docs/RESULTS.md of 3ab6296, 8a').
  """
  del num_classes
  dim = int(np.prod(element_shape))
  if movies is None:
    raise ValueError('rating_factor_mlp needs movies, the width of the movie one-hot at the '
                     'start of the input.')
  inputs = tf.keras.layers.Input(shape=(dim,))
  hidden = tf.keras.layers.Dense(int(hidden_units), activation='relu', name='hidden')(inputs)
  deep = tf.keras.layers.Dense(1, use_bias=False, name='deep')(hidden)
  factor = UserFactor(movies, factors, factor_stddev, factor_scale, name=FACTOR_LAYER)(inputs)
  wide = tf.keras.layers.Dense(1, kernel_initializer='zeros', name='wide')(inputs)
  score = tf.keras.layers.Activation('sigmoid')(tf.keras.layers.Add()([deep, factor, wide]))
  return tf.keras.Model(inputs, tf.keras.layers.Rescaling(float(max_rating))(score),
                        name='rating_factor_mlp')


@MODELS.register('lenet')
def lenet(element_shape: Sequence[int] = (32, 32, 3), num_classes: int = 10,
          filters: Sequence[int] = (6, 16), dense_units: Sequence[int] = (120, 84)) -> tf.keras.Model:
  """Two 5x5 convolutions with 2x2 max pooling, then three fully connected layers.

  The CIFAR model of FedEC Sec. 4.2.1 and of FedRep / LG-FedAvg's code
  ("two convolutional layers and three fully connected layers"), and report
  003's LeNet-style CIFAR-10 CNN. Grey images ([H, W]) get a channel axis.
  """
  layers = [tf.keras.layers.InputLayer(input_shape=tuple(element_shape))]
  if len(element_shape) == 2:
    layers.append(tf.keras.layers.Reshape((*element_shape, 1)))
  for f in filters:
    layers += [tf.keras.layers.Conv2D(int(f), 5, activation='relu'), tf.keras.layers.MaxPool2D(2)]
  layers.append(tf.keras.layers.Flatten())
  layers += [tf.keras.layers.Dense(int(u), activation='relu') for u in dense_units]
  layers.append(tf.keras.layers.Dense(num_classes))
  return tf.keras.Sequential(layers, name='lenet')
