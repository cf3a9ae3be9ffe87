/*
 * world.pml: what every model shares of the world around the protocol
 * (docs/model.md): lost messages, crashes, give-ups, and the clock's
 * tick. A model includes it after defining N, its number of clients.
 *
 * Safety checks (no PROGRESS): any message, request or reply may be
 * lost (or LOSSES of them in all, when a model defines it to bound its
 * search); one client may crash and one waiter give up; time may pass
 * between any two steps (TICK is always enabled).
 * PROGRESS: client 0, the one whose progress is checked, neither
 * crashes nor gives up (the others may, as the clock decides: faults); two losses in all (a run that loses every
 * message cannot progress); time passes only once every client waits
 * for it (TICK is timeout: a live client acts promptly).
 *
 * A waiter sleeps as wait.go's does, and a proctype's client index is
 * i: with PROGRESS, until a message, its timer (armed with the wait a
 * refusal tells), or its heartbeat's "try now", every BEAT ticks; in
 * the safety checks it may try again at any time (so these are skip).
 */

byte crashes = 1;       /* crashes, and waiters that give up: one each */
byte giveups = 1;
#if defined(PROGRESS) && !defined(LOSSES)
#define LOSSES 2
#endif
#ifdef LOSSES
byte losses = LOSSES;   /* messages, requests and replies lost, in all */
#define LOSE      atomic { losses > 0 -> losses-- }
#else
#define LOSE      true
#endif
#ifdef PROGRESS
/* A crash or give-up is the clock's choice at a tick (faults), which
   the client acts on at its next step that may crash or give up: an
   option always open would keep time from passing (timeout) until it
   was taken. */
bit doomed[N];          /* client crashes at its next chance */
bit quits[N];           /* waiter gives up at its next chance */
#define CRASH(i)  atomic { doomed[i] -> doomed[i] = 0 }
#define GIVEUP(i) atomic { quits[i] -> quits[i] = 0 }
#define TICK      timeout
#else
#define CRASH(i)  atomic { crashes > 0 -> crashes-- }
#define GIVEUP(i) atomic { giveups > 0 -> giveups-- }
#define TICK      true
#endif

/* faults is the clock's part in crashes and give-ups, called at every
   tick with a spare byte: with PROGRESS, it may doom one client but
   client 0 to crash, and one to give up, while the budgets last. */
#ifdef PROGRESS
inline faults(k) {
  k = 1;
  do
  :: k < N && crashes > 0 -> if :: doomed[k] = 1; crashes--; break :: k++ fi
  :: else -> break
  od;
  k = 1;
  do
  :: k < N && giveups > 0 -> if :: quits[k] = 1; giveups--; break :: k++ fi
  :: else -> break
  od;
  k = 0
}
#else
#define faults(k) skip
#endif

/* dec counts a timer down to 0; inc counts elapsed ticks, kept plus
   one (0: nothing to count), up to cap + 1: past cap is all one. */
#define dec(x)      if :: x > 0 -> x-- :: else fi
#define inc(x, cap) if :: x > 0 && x <= cap -> x++ :: else fi

#ifdef PROGRESS
bit want[N];            /* in Lock */
byte timer[N];          /* a waiter's wake-up, when armed */
bit armed[N];
byte due[N];            /* ticks to its next heartbeat */
#define BEAT 1
#endif

/* sleep arms a waiter's timer for w ticks, tryNow for none (a
   heartbeat's "try now"), endWait disarms it once the wait ends;
   wanted marks the start of a wait. */
#ifdef PROGRESS
#ifdef BROKEN_WAKEUP
#define sleep(w) skip                 /* only a message wakes it */
#define tryNow() skip
#else
#define sleep(w) timer[i] = w; armed[i] = 1
#define tryNow() timer[i] = 0; armed[i] = 1
#endif
#define endWait() want[i] = 0; armed[i] = 0; timer[i] = 0; due[i] = 0
#define wanted() want[i] = 1
#else
#define sleep(w) skip
#define tryNow() skip
#define endWait() skip
#define wanted() skip
#endif
