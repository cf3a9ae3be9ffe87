/*
 * mutex.pml: the Mutex and FairMutex protocol, checked with spin for
 * mutual exclusion and, for a FairMutex, FIFO (model_test.go runs it;
 * docs/model.md says what it covers and leaves out).
 *
 * It mirrors, and must change with:
 *   lua/queue_acquire.lua   a try, which joins the queue when refused
 *   lua/queue_beat.lua      a queued waiter's heartbeat (beat_queue)
 *   lua/queue_release.lua   Unlock: the lock goes to the first live
 *                           waiter (hand_over) or, while newcomers may
 *                           still barge in (a Mutex), that waiter is woken
 *   lua/queue_leave.lua     a waiter that gives up
 *   lua/owner_refresh.lua   a renewal
 *   lua/lib/waiters.lua     the queue: join, prune, barging, hand_over
 *   wait.go                 the waiter: its refusals, handedOver
 *   acquire.go              a try's reply, late or in time
 *   internal/watchdog       a lease's deadline, sent + TTL: Lost() then
 *
 * Time is a clock process whose ticks count every timer down at once:
 * Redis' key TTLs and waiters' liveness, the clients' lease deadlines and
 * the time since each request was sent. Between any two steps of a
 * client any number of ticks may pass (a slow or paused process); a
 * request runs at Redis as one atomic step some ticks after it was sent,
 * or never; its reply comes some ticks later, or never; a pub/sub message
 * may be lost; a waiter may try again at any time (a message, its timer,
 * a heartbeat's "try now", an error; PROGRESS below says when it does);
 * one client may crash at any step and one waiter give up, each starting
 * again with a new token. Redis keeps its data, unless RESTART is set.
 *
 * Properties, asserted at every grant, by a try's reply or a hand-off:
 *   granted    no other client holds a lease whose deadline has not
 *              passed (one that has passed has seen Lost());
 *   fifo       (FAIR) no waiter Redis keeps alive is ahead in the queue.
 * With PROGRESS, the ltl formula progress: client 0, which neither
 * crashes nor gives up, gets the lock whenever it wants it, under weak
 * fairness, with two losses in all. Its waiters sleep as wait.go's do:
 * until a message, their timer (armed with the wait a refusal tells), or
 * a heartbeat's "try now"; and time passes only while every client waits
 * for it (a live client acts promptly).
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
#define HOLD 1          /* ticks a holder keeps the lock before Unlock */
#ifdef FAIR
#define STARVE 0        /* FairMutex: no barging */
#else
#define STARVE 1        /* Mutex: a newcomer may barge while the first
                           waiter has waited less (starve_us) */
#endif
#define CLIENT(t) (((t) - 1) / ACQ)

mtype = { wake, grant };

/* Redis */
byte owner;             /* the owner key: the holder's token; 0: free */
byte ttl;               /* its PTTL */
byte q[NT];             /* the queue in arrival order, 0-terminated */
byte alive[NT];         /* a token's liveness left; 0: past its deadline */
byte age[NT];           /* a token's barging window left (Mutex) */
chan inbox[N] = [1] of { mtype, byte };  /* pub/sub, by the hub */

/* Clients, by index */
byte lease[N];          /* ticks to the lease's deadline; > 0 while held */
byte hold[N];           /* ticks left before the holder unlocks */
/* Elapsed ticks, plus one (0: nothing to count): */
byte el[N];             /* since the try in flight was sent */
byte er[N];             /* since the last refusal taken in was sent */
byte en[N];             /* since the renewal in flight was sent */

#include "world.pml"

/* The clock: one tick (see TICK in world.pml). */
active proctype clock() {
  byte k;
  do
  :: atomic {
       TICK;
       if
       :: ttl > 0 -> ttl--; if :: ttl == 0 -> owner = 0 :: else fi
       :: else
       fi;
       k = 1;
       do
       :: k < NT -> dec(alive[k]); dec(age[k]); k++
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

/* The queue (queue.pml): a token that leaves it loses its barging
   window too. */
#define dropped(t) age[t] = 0
#include "queue.pml"

/* join puts t at the end of the queue unless it is in it, and renews
   its liveness (join_queue). */
inline join(t) {
  qfind(t, k);
  if
  :: q[k] != t -> q[k] = t; age[t] = STARVE
  :: else
  fi;
  alive[t] = LIVE;
  k = 0
}

/* fifo asserts, for a FairMutex, that t is granted the lock with no live
   waiter ahead of it in the queue (all of them when t is a newcomer). */
inline fifo(t) {
#ifndef FAIR
  skip
#else
  j = 0;
  do
  :: j < NT - 1 && q[j] != 0 && q[j] != t -> assert(alive[q[j]] == 0); j++
  :: else -> break
  od
#endif
}

#include "inbox.pml"

/* handOver gives a lock just let go to the first live waiter, or wakes
   it while newcomers may still barge in (hand_over). */
inline handOver() {
  if
  :: q[0] != 0 && alive[q[0]] == 0 -> prune()  /* only when the first is dead */
  :: else
  fi;
  if
  :: q[0] == 0
  :: q[0] != 0 && age[q[0]] > 0 -> publish(wake, q[0])
  :: q[0] != 0 && age[q[0]] == 0 ->
     head = q[0];
     fifo(head);
     owner = head;
     ttl = alive[head];   /* until its liveness deadline (PXAT) */
     qremove(head, first);
     publish(grant, head);
     head = 0; first = 0
  fi
}

/* mayTake is may_take: a free lock goes to t when nobody waits, t is
   first, or a newcomer may still barge in. */
#ifdef BROKEN_BARGE
#define mayTake(t) true         /* a free lock to whoever asks */
#else
#define mayTake(t) (q[0] == 0 || q[0] == t || age[q[0]] > 0)
#endif

/* acquire is queue_acquire.lua with join: it sets ok, or the wait and
   kill of a refusal. */
inline acquire(t) {
  ok = 0;
  if
  :: owner == t -> ttl = T; ok = 1          /* a try sent again */
  :: owner == 0 ->
     prune();
     if
     :: mayTake(t) -> fifo(t); qremove(t, first); owner = t; ttl = T; ok = 1
     :: else -> join(t); wait = alive[q[0]]; refused(t, kill)
     fi
  :: owner != 0 && owner != t ->               /* held: no prune */
     join(t); wait = ttl; refused(t, kill)
  fi
}

/* beat is beat_queue: ok (try now), or the wait and kill of a refusal. */
inline beat(t) {
  ok = 0;
  qfind(t, k);
  if
  :: owner == t -> ok = 1
  :: owner != 0 && q[k] != t -> ok = 1
  :: owner != 0 && q[k] == t -> alive[t] = LIVE; wait = ttl; refused(t, kill)
  :: owner == 0 ->
     prune();
     qfind(t, k);
     if
     :: q[0] == 0 || q[0] == t || q[k] != t -> ok = 1
     :: else -> alive[t] = LIVE; wait = alive[q[0]]; refused(t, kill)
     fi
  fi;
  k = 0
}

/* release is queue_release.lua. */
inline release(t) {
#ifdef BROKEN_RELEASE
  if :: owner != 0 -> owner = 0; ttl = 0; handOver() :: else fi
#else
  if :: owner == t -> owner = 0; ttl = 0; handOver() :: else fi
#endif
}

/* leave is queue_leave.lua: a waiter gives up. */
inline leave(t) {
  qremove(t, first);
  if
  :: owner == t -> owner = 0; ttl = 0; handOver()
  :: owner == 0 && first -> handOver()
  :: else
  fi
}

/* granted asserts that client i, granted the lock at this step, is
   its only holder whose lease has not run out, and ends its wait; i
   holds it for HOLD. */
inline granted(i) {
  endWait();
  assert(lease[i] > 0);
  j = 0;
  do
  :: j < N -> assert(j == i || lease[j] == 0); j++
  :: else -> break
  od;
  j = 0;
  hold[i] = HOLD
}

/* A waiter may try again at any time: for a message, its timer, a
   heartbeat's "try now", or a transient error. Its place is kept by its
   tries and heartbeats; both set the time its hand-off deadline counts
   from (s.refused). */
proctype client(byte i) {
  byte g, t, j, k, head, wait, kill;
  bit ok, first;
try:
  atomic {
    if
    :: g == ACQ -> goto done
    :: else
    fi;
    t = i * ACQ + g + 1; g++;
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
  :: atomic { inbox[i]?[wake, eval(t)] -> inbox[i]?wake, eval(t); goto again }
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
       nempty(inbox[i]) && !inbox[i]?[grant, eval(t)] && !inbox[i]?[wake, eval(t)] -> inbox[i]?_, _
     }
  :: GIVEUP(i) -> atomic { endWait(); er[i] = 0; if :: leave(t) :: LOSE fi; goto try }
  :: CRASH(i) -> goto crash
  od;
held:
  do
  :: lease[i] == 0 -> goto lost                 /* Lost() */
  :: hold[i] == 0 -> break                      /* Unlock */
  :: lease[i] == 1 && hold[i] > 0 ->            /* a renewal, as the
                                                   lease nears its end */
     en[i] = 1;
     if
     :: atomic { ok = (owner == t); if :: ok -> ttl = T :: else fi }
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
  :: atomic { release(t) }                      /* Unlock after Lost() */
  :: true
  fi;
  goto try;
crash:
  atomic { endWait(); lease[i] = 0; hold[i] = 0; en[i] = 0; el[i] = 0; er[i] = 0; ok = 0; kill = 0 };
  goto try;
done:
}

#ifdef RESTART
/* Redis restarts once without persistence: its data is gone. */
active proctype restart() {
  byte k;
  atomic {
    owner = 0; ttl = 0;
    k = 0;
    do
    :: k < NT -> q[k] = 0; alive[k] = 0; age[k] = 0; k++
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
/* A client that neither crashes nor gives up, and wants the lock, gets it. */
ltl progress { [] (want[0] -> <> (lease[0] > 0)) }
#endif
