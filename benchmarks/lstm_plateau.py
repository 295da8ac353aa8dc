r"""How long the Shakespeare LSTM sits at the unigram plateau under plain-TF Adam.

  python -m benchmarks.lstm_plateau --cache_dir=<tff data folder> --lrs=0.01,0.001 --steps=150
  python -m benchmarks.lstm_plateau --cache_dir=<tff data folder> --batches=roles --max_clients=100

FedMeta(MAML) takes one server Adam step per round (FedMeta Appendix A.2, beta
= 0.01 for Shakespeare, Table 4). This asks what a step budget of that size
does to the model alone, with no federation and no inner loop: the
`shakespeare_lstm` of FedMeta Appendix A.1 (8-d embedding, 2 x LSTM(256), the
next character after an 80-character window), Adam on batches of --sequences
windows drawn (seeded) from the first --max_clients roles of TFF's
`shakespeare.sqlite` at the reduced configs' stride 3: a new batch every step
(`--fresh_batches`, as the federation's rounds see new roles) or one fixed
batch (which a 2-layer LSTM partly memorises). --heldout windows of the same
roles, never trained on, are scored too. `--batches=roles` instead trains
each step on every window of --roles_per_step roles drawn at random (the
federated round's batch: the reduced MAML config's 4 roles, their mean loss
over windows, as FedMeta's example weighting gives, with no inner step;
`--windows_per_role` caps each role's share, drawn afresh every step), to
tell the batch's make-up apart from the meta-gradient. It prints the unigram entropy of the
held-out windows (the loss of predicting the character frequencies, which a
model that ignores its input reaches), then every --every steps the training
batch's loss, the held-out loss and accuracy, and the seconds so far. Not a
test: nothing is asserted.
"""

import time

from tff_meta.core import startup  # noqa: E402

startup.import_tensorflow()   # first: TF_CPP_MIN_LOG_LEVEL=2, TF's start-up noise dropped

from absl import app, flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tff_meta.data import tff_native  # noqa: E402
from tff_meta.models import keras_models  # noqa: E402

flags.DEFINE_string('cache_dir', None, 'Folder holding TFF\'s shakespeare.sqlite.')
flags.DEFINE_list('lrs', ['0.01'], 'Adam learning rates to try, one run each.')
flags.DEFINE_integer('steps', 150, 'Full-batch Adam steps per run.')
flags.DEFINE_integer('every', 10, 'Print every this many steps.')
flags.DEFINE_integer('sequences', 1024, 'Windows in a training batch.')
flags.DEFINE_integer('heldout', 1024, 'Windows scored, never trained on.')
flags.DEFINE_bool('fresh_batches', True, 'A new training batch every step (else one fixed '
                  'batch).')
flags.DEFINE_enum('batches', 'windows', ['windows', 'roles'],
                  'windows: --sequences windows drawn over all roles each step; roles: every '
                  'window of --roles_per_step roles drawn each step, the loss their mean over '
                  'windows (the federated round\'s batch: FedMeta weights the roles by their '
                  'examples), summed chunk by chunk.')
flags.DEFINE_integer('roles_per_step', 4, 'Roles a step with --batches=roles (the reduced '
                     'configs\' clients per round).')
flags.DEFINE_integer('windows_per_role', 0, 'With --batches=roles: at most this many of a '
                     'drawn role\'s windows (a fresh random subset each step); 0 = all.')
flags.DEFINE_integer('max_clients', 40, 'Roles the windows are drawn from (sorted ids).')
flags.DEFINE_integer('stride', 3, 'Window stride (the reduced configs\' 3).')
flags.DEFINE_integer('seed', 0, 'Seeds the draw and the initial weights.')
flags.mark_flags_as_required(['cache_dir'])
FLAGS = flags.FLAGS


def main(argv):
  del argv
  ds = tff_native.load_shakespeare(FLAGS.cache_dir, max_clients=FLAGS.max_clients,
                                   stride=FLAGS.stride)
  x = np.concatenate([c.x for c in ds.clients.values()])
  y = np.concatenate([c.y for c in ds.clients.values()])
  rng = np.random.default_rng(FLAGS.seed)
  order = rng.permutation(len(x))
  hx, hy = x[order[:FLAGS.heldout]], y[order[:FLAGS.heldout]]
  pool = order[FLAGS.heldout:]
  if FLAGS.batches == 'windows' and len(pool) < FLAGS.sequences:
    raise app.UsageError(f'{len(x)} windows: too few for --heldout plus --sequences')
  held = np.isin(np.arange(len(x)), order[:FLAGS.heldout])
  bounds = np.cumsum([0] + [len(c.y) for c in ds.clients.values()])
  role_rows = [r for r in (np.arange(a, b)[~held[a:b]] for a, b in zip(bounds[:-1], bounds[1:]))
               if len(r)]   # each role's windows, less the held-out ones
  freq = np.bincount(hy, minlength=ds.num_classes) / len(hy)
  unigram = float(-np.sum(freq[freq > 0] * np.log(freq[freq > 0])))
  print(f'{len(x)} windows from {len(ds.clients)} roles; held out {len(hy)}: unigram entropy '
        f'{unigram:.4f}, most frequent character {100 * freq.max():.1f}%')
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  for lr in (float(v) for v in FLAGS.lrs):
    tf.random.set_seed(FLAGS.seed)
    model = keras_models.shakespeare_lstm()
    opt = tf.keras.optimizers.Adam(lr)

    @tf.function
    def step(bx, by):
      with tf.GradientTape() as tape:
        loss = loss_fn(by, model(bx))
      grads = tape.gradient(loss, model.trainable_variables)
      opt.apply_gradients(zip(grads, model.trainable_variables))  # pylint: disable=cell-var-from-loop
      return loss

    grad_signature = [tf.TensorSpec([None, x.shape[1]], tf.int32), tf.TensorSpec([None], tf.int32)]

    @tf.function(input_signature=grad_signature)
    def chunk_gradient(bx, by):   # the summed loss of a chunk, and its gradient
      with tf.GradientTape() as tape:
        total = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(
            by, model(bx), from_logits=True))
      return total, [tf.convert_to_tensor(g) for g in
                     tape.gradient(total, model.trainable_variables)]   # embedding: dense

    # Adam on the mean loss over every row, 512 rows at a time. Not `learning.inner_loop.mean_gradient`:
    # that differentiates a function of weight tensors (`models.functional`), and TFF's
    # functional Keras model refuses to run outside a graph context (a TFF computation),
    # while this benchmark trains the eager Keras model that `step` and `heldout` use.
    def roles_step(rows):
      total, grads = 0.0, None
      for k in range(0, len(rows), 512):
        part, g = chunk_gradient(x[rows[k:k + 512]], y[rows[k:k + 512]])
        total += float(part)
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
      opt.apply_gradients(zip([g / len(rows) for g in grads], model.trainable_variables))  # pylint: disable=cell-var-from-loop
      return total / len(rows)

    @tf.function
    def heldout():
      logits = model(hx)
      hit = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == hy, tf.float32)
      return loss_fn(hy, logits), tf.reduce_mean(hit)

    draw = np.random.default_rng(FLAGS.seed + 1)
    cap = lambda rows: (draw.choice(rows, FLAGS.windows_per_role, replace=False)  # pylint: disable=cell-var-from-loop
                        if 0 < FLAGS.windows_per_role < len(rows) else rows)
    fixed = pool[:FLAGS.sequences]
    start = time.time()
    print(f'Adam {lr}: step, training-batch loss, held-out loss, held-out accuracy %, seconds')
    for i in range(FLAGS.steps):
      if FLAGS.batches == 'roles':
        picked = draw.choice(len(role_rows), FLAGS.roles_per_step, replace=False)
        rows = np.concatenate([cap(role_rows[r]) for r in picked])
        loss = roles_step(rows)
        if i % FLAGS.every == 0 or i == FLAGS.steps - 1:
          shown = sorted(int(r) for r in picked) if len(picked) <= 8 else f'{len(picked)} roles'
          print(f'  roles {shown}: {len(rows)} windows',
                flush=True)
      else:
        batch = draw.choice(pool, FLAGS.sequences, replace=False) if FLAGS.fresh_batches else fixed
        loss = step(x[batch], y[batch])
      if i % FLAGS.every == 0 or i == FLAGS.steps - 1:
        h_loss, h_acc = heldout()
        print(f'  {i} {float(loss):.4f} {float(h_loss):.4f} {100 * float(h_acc):.1f} '
              f'{time.time() - start:.0f}', flush=True)


if __name__ == '__main__':
  app.run(main)
