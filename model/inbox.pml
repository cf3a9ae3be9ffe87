/*
 * inbox.pml: a client's pub/sub messages, for the models whose messages
 * are {kind, token} (mutexset.pml's also name a member, and it has its
 * own). A model includes it once it has declared inbox[N] (one buffered
 * message per client, as the hub delivers it), CLIENT(t) and the mtype
 * grant; the client-side inlines use the calling process's i.
 */

/* publish sends m for t on the pub/sub channel of t's client; it may be
   lost, and is when the subscriber's buffer is full. */
inline publish(m, t) {
  if
  :: nfull(inbox[CLIENT(t)]) -> inbox[CLIENT(t)]!m, t
  :: full(inbox[CLIENT(t)])
  :: LOSE
  fi
}

/* refused notes, for a refusal of t's try or heartbeat, whether a grant
   for t waits unread: it was sent before this refusal, so the client
   that reads the refusal must not take it (handedOver's at < refusedAt). */
inline refused(t, kill) {
  kill = inbox[CLIENT(t)]??[grant, eval(t)]
}

/* drain drops what the client's subscription holds: a new token's
   waiter hears nothing sent for an old one. */
inline drain(i) {
  do
  :: inbox[i]?_, _
  :: empty(inbox[i]) -> break
  od
}

/* stale drops a grant for t that waits unread if kill says it was sent
   before the refusal of a try just taken in (handedOver's at <
   refusedAt); beatStale, before a heartbeat's refusal. */
#ifdef BROKEN_STALE
#define stale(t, kill) skip
#else
#define stale(t, kill) \
  if \
  :: kill && inbox[i]??[grant, eval(t)] -> inbox[i]??grant, eval(t) \
  :: else \
  fi
#endif
#if defined(BROKEN_STALE) || defined(BROKEN_BEATSTALE)
#define beatStale(t, kill) skip
#else
#define beatStale(t, kill) stale(t, kill)
#endif
