/*
 * semaphore.pml: the Semaphore protocol, checked with spin for its
 * capacity and FIFO order (model_test.go runs it; docs/model.md says
 * what it covers and leaves out).
 *
 * It mirrors, and must change with:
 *   lua/sem_acquire.lua     a try, which joins the queue when refused;
 *                           with ARGV[6]=2 a queued waiter's heartbeat,
 *                           which renews its place (keep_place) and may
 *                           grant waiters too, this one among them
 *   lua/sem_release.lua     a release: the freed permits go to the
 *                           waiters they now let through (grant_waiters)
 *   lua/sem_leave.lua       a waiter that gives up
 *   lua/sem_refresh.lua     a renewal
 *   lua/lib/permits.lua     the leases: permits_and_lease, drop_lease,
 *                           grant_waiters (in queue order, stopping at
 *                           the first that does not fit; a granted
 *                           waiter's lease lasts until its liveness
 *                           deadline, and it is told on its channel)
 *   lua/lib/waiters.lua     the queue: join_queue, keep_place, prune
 *   semaphore.go            the heartbeat is the try in joinBeat mode,
 *                           leave is sem_leave, grants are published on
 *                           the release channel to the waiter's token
 *   wait.go                 the waiter: its refusals, handedOver
 *   acquire.go              a try's reply, late or in time
 *   internal/watchdog       a lease's deadline, sent + TTL: Lost() then
 *
 * The world is mutex.pml's (world.pml): time is a clock process whose
 * ticks count every timer down at once: the leases' deadlines in Redis,
 * waiters' liveness, the clients' lease deadlines and the time since
 * each request was sent. Between any two steps of a client any number of
 * ticks may pass; a request runs at Redis as one atomic step some ticks
 * after it was sent, or never; its reply comes some ticks later, or
 * never; a pub/sub message may be lost; a waiter may try again at any
 * time (a grant, its timer, a heartbeat's "try now", an error; PROGRESS
 * says when it does); one client may crash at any step and one waiter
 * give up, each starting again with a new token. Redis keeps its data,
 * unless RESTART is set.
 *
 * The semaphore has SIZE 2 permits, every caller's. Each token asks a
 * fixed number, NEED(t): in the safety checks client 0 asks 1 each time
 * and client 1 asks 1, then 2, so that two holders share the permits,
 * and a request for 2 queued first holds back one for 1 behind it while
 * the third permit is held (by a lease that a crash, a lost release or a
 * pause left in Redis); with PROGRESS, client 0 asks 2 and the others 1:
 * a large request among a stream of small ones.
 *
 * Properties, asserted at every grant, in the same atomic step:
 *   capacity  (a try's reply or a hand-off read by the client) the
 *             permits held by clients whose lease deadline has not
 *             passed, the new holder's included, are at most SIZE (one
 *             whose deadline passed has seen Lost());
 *   fifo      (a grant in Redis, by a try or grant_waiters) no waiter
 *             Redis keeps alive is ahead of the granted one in the queue,
 *             none at all when a newcomer takes permits (no barging).
 * With PROGRESS, the ltl formula progress: client 0, which neither
 * crashes nor gives up, gets its permits whenever it wants them, under
 * weak fairness, with two losses in all; waiters sleep as wait.go's do,
 * and time passes only while every client waits for it (world.pml).
 * Each BROKEN_* variant drops one rule the code keeps, and the checker
 * must reject it; RESTART must fail too (the documented window).
 */

#ifndef N
#define N 2             /* clients */
#endif
#ifndef ACQ
#define ACQ 2           /* acquisitions per client, each its own token */
#endif
#define NT (N*ACQ+1)    /* tokens 1..N*ACQ; 0: none */
#ifndef T
#define T 3             /* lease TTL, in ticks */
#endif
#define LIVE 2          /* waiter liveness timeout: also a hand-off's lease */
#define HOLD 1          /* ticks a holder keeps its permits before Release */
#define SIZE 2          /* the semaphore's size, every caller's */
#define CLIENT(t) (((t) - 1) / ACQ)
/* NEED(t): the permits token t asks for (see above). */
#ifdef PROGRESS
#define NEED(t) (CLIENT(t) == 0 -> 2 : 1)
#else
#define NEED(t) ((t) == 2 * ACQ -> 2 : 1)
#endif

mtype = { grant };

/* Redis */
byte used;              /* the main hash's 'used': permits of live leases */
byte rl[NT];            /* a token's lease in the leases zset: ticks to its
                           deadline; 0: none (dropped once it passes) */
byte q[NT];             /* the queue in arrival order, 0-terminated */
byte alive[NT];         /* a token's liveness left; 0: past its deadline */
chan inbox[N] = [1] of { mtype, byte };  /* pub/sub, by the hub */

/* Clients, by index */
byte need[N];           /* permits of the acquisition under way, or held */
byte lease[N];          /* ticks to the lease's deadline; > 0 while held */
byte hold[N];           /* ticks left before the holder releases */
/* Elapsed ticks, plus one (0: nothing to count): */
byte el[N];             /* since the try in flight was sent */
byte er[N];             /* since the last refusal taken in was sent */
byte en[N];             /* since the renewal in flight was sent */

#include "world.pml"

/* The leases (lib/permits.lua) */

/* freePermits takes n permits off 'used', and when none is left deletes
   the two keys, every lease with them (drop_lease and end_lease: HINCRBY
   used -n, DEL when <= 0; or, given the count read before, as
   sem_release's common path does, DEL when used <= n). While 'used' counts the live leases, as it does but in
   BROKEN_RELEASE, no other lease is left then. */
inline freePermits(n) {
  if
  :: used > n -> used = used - n
  :: else ->
     used = 0;
     m = 1;
     do
     :: m < NT -> rl[m] = 0; m++
     :: else -> break
     od;
     m = 0
  fi
}

/* dropLease takes t's lease out (drop_lease); permits_and_lease drops
   one whose deadline passed, which the clock does at once. */
inline dropLease(t) {
  rl[t] = 0;
  freePermits(NEED(t))
}

/* The clock: one tick (see TICK in world.pml). */
active proctype clock() {
  byte k, m;
  do
  :: atomic {
       TICK;
       k = 1;
       do
       :: k < NT ->
          if
          :: rl[k] == 1 -> dropLease(k)
          :: else -> dec(rl[k])
          fi;
          dec(alive[k]);
          k++
       :: else -> break
       od;
       k = 0;
       do
       :: k < N ->
          dec(lease[k]); dec(hold[k]);
#ifdef PROGRESS
          dec(timer[k]); dec(due[k]);
#endif
          inc(el[k], T); inc(er[k], LIVE); inc(en[k], T);
          k++
       :: else -> break
       od;
       faults(k)
     }
  od
}

/* The queue (queue.pml): a token that leaves it leaves nothing else. */
#define dropped(t) skip
#include "queue.pml"

/* join puts t at the end of the queue unless it is in it, and renews
   its liveness (join_queue). */
inline join(t) {
  qfind(t, k);
  if
  :: q[k] != t -> q[k] = t
  :: else
  fi;
  alive[t] = LIVE;
  k = 0
}

/* fifo asserts that t is granted permits with no live waiter ahead of it
   in the queue (all of them when t is a newcomer). */
inline fifo(t) {
  j = 0;
  do
  :: j < NT - 1 && q[j] != 0 && q[j] != t -> assert(alive[q[j]] == 0); j++
  :: else -> break
  od;
  j = 0
}

#include "inbox.pml"

/* grantOne makes the waiter t (live, its place at k) a holder until its
   liveness deadline, out of the queue, and tells it. */
inline grantOne(t, k) {
  fifo(t);
  rl[t] = alive[t];             /* until its liveness deadline (>= 1) */
  used = used + NEED(t);
  shiftOut(k);
  alive[t] = 0;
  publish(grant, t)
}

/* fits is grant_waiters' check: all t asks fits under the size. */
#ifdef BROKEN_FIT
#define fits(t) true                    /* granted whatever is free */
#else
#define fits(t) (NEED(t) + used <= SIZE)
#endif

/* grantWaiters hands the free permits to the live waiters in queue
   order, each as long as all it asks fits, and stops at the first that
   does not fit (grant_waiters). */
inline grantWaiters() {
  prune();
#ifdef BROKEN_SKIP
  h = 0;
  do                                    /* past one that does not fit */
  :: h < NT - 1 && q[h] != 0 && fits(q[h]) -> head = q[h]; k = h; grantOne(head, k)
  :: h < NT - 1 && q[h] != 0 && !fits(q[h]) -> h++
  :: else -> break
  od;
  h = 0;
#else
  do
  :: q[0] != 0 && fits(q[0]) -> head = q[0]; k = 0; grantOne(head, k)
  :: else -> break
  od;
#endif
  head = 0; k = 0
}

/* waitFor sets the wait a refusal of t tells: until the liveness
   deadline of the waiter ahead, or for the first in line until the
   first lease's deadline. Only PROGRESS's timers use it. */
inline waitFor(t) {
#ifdef PROGRESS
  if
  :: q[0] != t -> wait = alive[q[0]]
  :: else ->
     wait = 0; j = 1;
     do
     :: j < NT ->
        if :: rl[j] > 0 && (wait == 0 || rl[j] < wait) -> wait = rl[j] :: else fi;
        j++
     :: else -> break
     od;
     j = 0
  fi
#else
  skip
#endif
}

/* mayTake: free permits go to t when nobody waits or t is first. */
#ifdef BROKEN_BARGE
#define mayTake(t) true         /* to whoever asks, past the queue */
#else
#define mayTake(t) (q[0] == 0 || q[0] == t)
#endif

/* acquire is sem_acquire.lua with join: it sets ok, or the wait and kill
   of a refusal. Leases past their deadline are gone already (the
   clock's dropLease is permits_and_lease's). */
inline acquire(t) {
  ok = 0;
  if
  :: q[0] != 0 -> grantWaiters()
  :: else
  fi;
  if
  :: rl[t] > 0 ->               /* sent again, or handed to it: ZADD GT */
     if :: rl[t] < T -> rl[t] = T :: else fi; ok = 1
  :: rl[t] == 0 && mayTake(t) && NEED(t) + used <= SIZE ->
     fifo(t); qremove(t, first); first = 0;
     rl[t] = T; used = used + NEED(t); ok = 1
  :: else -> join(t); waitFor(t); refused(t, kill)
  fi
}

/* beat is sem_acquire.lua with ARGV[6]=2, a waiter's heartbeat: it may
   grant waiters, then sets ok (try now: the permits were handed to t, or
   t is queued no more), or the wait and kill of a refusal (keep_place). */
inline beat(t) {
  ok = 0;
  if
  :: q[0] != 0 -> grantWaiters()
  :: else
  fi;
  qfind(t, k);
  if
  :: rl[t] > 0 || q[k] != t -> ok = 1
  :: else -> alive[t] = LIVE; waitFor(t); refused(t, kill)
  fi;
  k = 0
}

/* release is sem_release.lua: only a live lease of t is let go. */
inline release(t) {
#ifdef BROKEN_RELEASE
  rl[t] = 0; freePermits(NEED(t));      /* whether t holds them or not */
  if :: q[0] != 0 -> grantWaiters() :: else fi
#else
  if
  :: rl[t] > 0 -> dropLease(t); if :: q[0] != 0 -> grantWaiters() :: else fi
  :: else
  fi
#endif
}

/* leave is sem_leave.lua: a waiter gives up, and lets go of a lease it
   holds without having seen it. */
inline leave(t) {
  qremove(t, first);
  if
  :: rl[t] > 0 -> dropLease(t); first = 1
  :: else
  fi;
  if
  :: first && q[0] != 0 -> grantWaiters()
  :: else
  fi;
  first = 0
}

/* granted asserts that the permits held by clients whose lease has not
   run out, client i's just granted among them, fit in the semaphore, and
   ends i's wait; i holds them for HOLD. */
inline granted(i) {
  endWait();
  assert(lease[i] > 0);
  j = 0; inuse = 0;
  do
  :: j < N && lease[j] > 0 -> inuse = inuse + need[j]; j++
  :: j < N && lease[j] == 0 -> j++
  :: else -> break
  od;
  assert(inuse <= SIZE);
  j = 0; inuse = 0;
  hold[i] = HOLD
}

/* A waiter may try again at any time: for a grant, its timer, a
   heartbeat's "try now", or a transient error. Its place is kept by its
   tries and heartbeats; both set the time its hand-off deadline counts
   from (s.refused). */
proctype client(byte i) {
  /* wait is reset once a timer is armed with it: a value kept would
     split the states for nothing (nearly twice as many with PROGRESS) */
  byte g, t, j, k, m, h, head, wait, kill, inuse;
  bit ok, first;
try:
  atomic {
    if
    :: g == ACQ -> goto done
    :: else
    fi;
    t = i * ACQ + g + 1; g++;
    need[i] = NEED(t);
    er[i] = 0; drain(i);
    wanted()
  }
again:
  el[i] = 1;                                    /* a try sent */
  if
  :: atomic { acquire(t) }
  :: LOSE -> el[i] = 0; tryNow(); goto waiting  /* lost, or timed out */
  :: CRASH(i) -> goto crash
  fi;
  if
  :: LOSE -> atomic { ok = 0; kill = 0; el[i] = 0; tryNow(); goto waiting }  /* reply lost */
  :: CRASH(i) -> goto crash
  :: atomic { ok && el[i] > T -> ok = 0; el[i] = 0; tryNow(); goto waiting }  /* late */
  :: atomic { ok && el[i] <= T -> lease[i] = T + 1 - el[i]; ok = 0; el[i] = 0; er[i] = 0; granted(i); goto held }
  :: atomic { !ok -> er[i] = el[i]; el[i] = 0; stale(t, kill); kill = 0; sleep(wait); wait = 0 }  /* s.refused */
  fi;
  /* A try that met an error, or a late reply, sleeps before the next
     one as a refused one does: it may read a hand-off or a heartbeat's
     reply meanwhile. */
waiting:
  do
#ifdef PROGRESS
  :: atomic { armed[i] && timer[i] == 0 -> goto again }
  :: atomic {                                   /* a heartbeat */
       due[i] == 0 -> due[i] = BEAT;
       beat(t);
       if
       :: ok -> ok = 0; wait = 0; tryNow()
       :: else -> er[i] = 1; beatStale(t, kill); kill = 0; sleep(wait); wait = 0
       fi
     }
#else
  :: goto again
  :: atomic {                                   /* a heartbeat */
       beat(t);
       if
       :: ok -> ok = 0                          /* try now */
       :: else -> er[i] = 1; beatStale(t, kill); kill = 0
       fi;
       wait = 0
     }
#endif
  :: atomic {                                   /* handedOver */
       inbox[i]?[grant, eval(t)] -> inbox[i]?grant, eval(t);
#ifdef BROKEN_DEADLINE
       lease[i] = LIVE;                         /* from now, not s.refused */
#else
       if
       :: er[i] > 0 && er[i] <= LIVE -> lease[i] = LIVE + 1 - er[i]
       :: else
       fi;
#endif
       if
       :: lease[i] > 0 -> er[i] = 0; granted(i); goto held
       :: else -> goto again
       fi
     }
  :: atomic {                                   /* for an old token */
       nempty(inbox[i]) && !inbox[i]?[grant, eval(t)] -> inbox[i]?_, _
     }
  :: GIVEUP(i) -> atomic { endWait(); er[i] = 0; if :: leave(t) :: LOSE fi; goto try }
  :: CRASH(i) -> goto crash
  od;
held:
  do
  :: lease[i] == 0 -> goto lost                 /* Lost() */
  :: hold[i] == 0 -> break                      /* Release */
  :: lease[i] == 1 && hold[i] > 0 ->            /* a renewal, as the
                                                   lease nears its end */
     en[i] = 1;
     if
     :: atomic { ok = (rl[t] > 0); if :: ok -> rl[t] = T :: else fi }
        atomic {
          if
          :: ok && lease[i] > 0 && T + 1 - en[i] > lease[i] -> lease[i] = T + 1 - en[i]
          :: !ok -> lease[i] = 0
          :: else
          fi;
          en[i] = 0; ok = 0
        }
     :: LOSE -> en[i] = 0                       /* no news */
     fi
  :: CRASH(i) -> goto crash
  od;
  atomic { lease[i] = 0; hold[i] = 0 };
  if
  :: atomic { release(t) }
  :: LOSE
  :: CRASH(i) -> goto crash
  fi;
  goto try;
lost:
  hold[i] = 0;
  if
  :: atomic { release(t) }                      /* Release after Lost() */
  :: true
  fi;
  goto try;
crash:
  atomic { endWait(); lease[i] = 0; hold[i] = 0; en[i] = 0; el[i] = 0; er[i] = 0; ok = 0; kill = 0; wait = 0 };
  goto try;
done:
}

#ifdef RESTART
/* Redis restarts once without persistence: its data is gone. */
active proctype restart() {
  byte k;
  atomic {
    used = 0;
    k = 0;
    do
    :: k < NT -> rl[k] = 0; q[k] = 0; alive[k] = 0; k++
    :: else -> break
    od
  }
}
#endif

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < N -> run client(i); i++
    :: else -> break
    od
  }
}


#ifdef PROGRESS
/* A client that neither crashes nor gives up, and wants its permits,
   gets them. */
ltl progress { [] (want[0] -> <> (lease[0] > 0)) }
#endif
