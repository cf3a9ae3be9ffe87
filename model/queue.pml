/*
 * queue.pml: the queue of waiters (lua/lib/waiters.lua) that the queued
 * models share. A model includes it once it has declared q (the tokens
 * in arrival order, 0-terminated), alive (each token's liveness left;
 * 0: past its deadline), NT, and dropped(t), its own part in a token
 * that leaves the queue. The inlines use the calling process's j and k,
 * and leave them 0.
 */

/* qfind sets pos to t's place in the queue, or to its end. */
inline qfind(t, pos) {
  pos = 0;
  do
  :: pos < NT - 1 && q[pos] != 0 && q[pos] != t -> pos++
  :: else -> break
  od
}

/* shiftOut closes the queue's gap at k, moving k (k is spent). */
inline shiftOut(k) {
  do
  :: k < NT - 2 -> q[k] = q[k + 1]; k++
  :: else -> break
  od;
  q[NT - 2] = 0
}

/* qremove takes t out of the queue (drop_waiters, withdraw), and tells
   whether it was first. */
inline qremove(t, wasFirst) {
  qfind(t, k);
  wasFirst = (k == 0 && q[0] == t && t != 0);
  if
  :: q[k] == t && t != 0 ->
     shiftOut(k);
     alive[t] = 0; dropped(t)
  :: else
  fi;
  k = 0
}

/* prune drops waiters past their liveness deadline (prune_waiters). */
inline prune() {
  j = 0;
  do
  :: j < NT - 1 && q[j] != 0 && alive[q[j]] == 0 ->
     dropped(q[j]);
     k = j;
     shiftOut(k)
  :: j < NT - 1 && q[j] != 0 && alive[q[j]] > 0 -> j++
  :: else -> break
  od;
  j = 0; k = 0
}
