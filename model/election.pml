/*
 * election.pml: an Election's terms and its following (Observe),
 * checked with spin (model_test.go runs it; docs/model.md says what it
 * covers and leaves out).
 *
 * Campaigning is a FairMutex's protocol, which mutex.pml checks for
 * exclusion and FIFO; here the queue is abstracted to what matters for
 * terms and announcements: a set of live waiters, any of which a
 * hand-over may pick (FIFO is mutex.pml's), whose places lapse at their
 * liveness deadline. What this model adds is the Election's: terms, the
 * leader's value, and the observers that follow them.
 *
 * It mirrors, and must change with:
 *   lua/queue_acquire.lua   a try (Campaign), which takes a free lock, with
 *                           a new term, and announces it ("leader",
 *                           ARGV[5..6]), or joins the queue when refused
 *   lua/queue_release.lua   Resign: the lock goes to a live waiter
 *                           (hand_over, whose message "<tok> <fence> <µs>"
 *                           goes to the waiter's client, then "leader"
 *                           for followers), or is left free and
 *                           announced ("leader", ARGV[3])
 *   lua/queue_leave.lua     a campaigner that gives up, announcing a lock
 *                           it held and left free, or handed on
 *   lua/owner_refresh.lua   a renewal (refresh_owner in lua/lib/owner.lua),
 *                           announcing a lease brought nearer its end
 *   lua/elect_proclaim.lua  Proclaim: a new value, within the term
 *   lua/elect_leader.lua    the follower's read (owner_status)
 *   lua/lib/clock.lua       issue_fence: the term, max(last + 1, now)
 *   election.go             Campaign, Proclaim (Lost() on a refusal),
 *                           Resign
 *   observe.go              the follower: subscribe, read, pass on, sleep
 *                           until a message or the leader's lease end
 *                           (+1ms), back off on an error; an observer's
 *                           send (dedup, never an older term); join
 *   internal/notify/hub.go  a message wakes a follower (key Every) for any
 *                           payload; a wake-up pending is kept, one; a
 *                           dropped connection loses messages, and the
 *                           hub, resubscribed, wakes every waiter
 *   internal/watchdog       a lease's deadline, sent + TTL, lowered by a
 *                           renewal whose outcome is unknown: Lost() then
 *
 * Time is a clock process whose ticks count every timer down at once:
 * the leader key's TTL and waiters' liveness, the campaigners' lease
 * deadlines, the time since each request was sent, and the follower's
 * timer. Between any two steps any number of ticks may pass (a slow or
 * paused process); a request runs at Redis as one atomic step some
 * ticks after it was sent, or never; its reply comes some ticks later,
 * or never; one campaigner may crash at any step and one waiter give up,
 * each campaigning again, with a new token, if it has campaigns left.
 * A message to a campaigner may be lost. A message to the follower is
 * lost only with its hub's connection (internal/notify: Redis dropped
 * it, as it does a subscriber that falls behind, or the network did),
 * after which the hub, resubscribed, wakes the follower; in the safety
 * checks that is a late wake-up, and the follower may be that slow
 * anyway, so there it is never lost. A leader renews in its lease's
 * last tick (automatic renewals, which never bring the lease's end
 * nearer than its deadline), or at once after a hand-over that left it
 * a lease longer than its TTL: a Refresh, which does. Redis keeps its
 * data, unless RESTART is set.
 *
 * Properties, in every check:
 *   rising     (assertion, at every term issued) the new term is above
 *              every term issued before (the fence key holds the last);
 *   leaders    (assertion, at every grant, by a try's reply or a
 *              hand-over) no other campaigner holds a leadership whose
 *              deadline has not passed: a leader's Lost() closes before
 *              another's lease starts;
 *   ownValue   (assertion, at every read of the follower) the value
 *              Redis shows for a term is one its leader announced;
 *   told       (assertion, at every script that changes the leader or
 *              its value) a follower that read the old state is woken,
 *              or its hub's connection is down (it wakes it once back).
 * In the safety checks the follower reads at any time (its timer, an
 * error's back-off) and a campaigner tries again at any time. With
 * PROGRESS the follower sleeps as observe.go's does, until a message or
 * its timer (the leader's lease end, or a back-off after an error), and
 * passes what it reads to two observers (one joins at any time); time
 * passes only while every process waits for it; two messages, requests
 * or replies are lost in all; campaigner 0 neither crashes nor gives up,
 * and its last campaign may lead for good. Then:
 *   following  (ltl, under weak fairness) the observers end up reporting,
 *              for good, the leader Redis has (value and term), or
 *              nobody. Every run's leadership stops changing (campaigns
 *              are few), so this says that no last change goes
 *              unreported, a leader that dies without a word (its lease
 *              runs out, nothing is published) included;
 *   expiry     (assertion, at the tick a leader's key runs out) a
 *              follower that read that leader, its timer armed, is due
 *              to wake then, unless woken already: it learns at once;
 *   monotonic  (assertion, at every send to an observer) the follower
 *              never passes on a term lower than one the observer was
 *              sent, so send's filter never drops one: observers never
 *              report an older term (the filter is not needed for it).
 * Each BROKEN_* variant drops one rule the code keeps, and the checker
 * must reject it; RESTART must fail too (the documented window).
 *
 * BROKEN_INFLIGHT: the watchdog counts a renewal in flight only once its
 * outcome lands, as it did before the model found the defect: a Refresh
 * that brings the lease's end nearer, applied at once and answered late,
 * left its holder leading past the key's expiry (fails leaders). The
 * code now lowers the deadline to sent + TTL when the renewal is sent
 * (send in internal/watchdog/watch.go).
 */

#ifndef N
#define N 2             /* campaigners */
#endif
#ifndef ACQ
#define ACQ 2           /* campaigns of campaigner 0, each its own token */
#endif
#ifndef ACQ1
#define ACQ1 1          /* campaigns of each other campaigner */
#endif
#define NT (N*ACQ+1)    /* tokens 1..N*ACQ; 0: none */
#ifndef T
#define T 2             /* the leadership's TTL, in ticks */
#endif
#define LIVE 3          /* waiter liveness timeout: also a hand-over's lease,
                           longer than T (a TTL under the 3s liveness), so
                           the first renewal after a hand-over brings the
                           lease's end nearer */
#define HOLD 1          /* ticks a leader leads before it resigns */
#ifndef TERMS
#define TERMS 3         /* terms issued in a run, at most: once spent, a
                           free lock stays free (a try's reply may come
                           late, and its token take the lock again, for
                           ever) */
#endif
#define CLIENT(t) (((t) - 1) / ACQ)

/* Redis */
byte owner;             /* the owner key: the leader's token; 0: nobody */
byte ttl;               /* its PTTL */
byte term;              /* its fence: the term (0 while nobody leads) */
byte vterm;             /* its value: announced by the leader of this term */
bit vver;               /* ... in its Campaign (0) or a Proclaim (1) */
byte fkey;              /* the fence key: the last term issued */
byte alive[NT];         /* a waiter's liveness left; 0: not queued, or dead */

/* Campaigners, by index */
byte lead[N];           /* ticks to the leadership's deadline; > 0 while led */
byte hold[N];           /* ticks left before the leader resigns */
byte fence[N];          /* its leadership's term (Lease.Fence) */
bit pv[N];              /* proclaimed in this term */
byte gtok[N];           /* a hand-over's message, for this token, unread */
byte gl[N];             /* ... the lease it leaves (counted from the hand-over) */
byte gf[N];             /* ... its term */
/* Elapsed ticks, plus one (0: nothing to count): */
byte el[N];             /* since the try in flight was sent */
byte en[N];             /* since the renewal in flight was sent */

/* The follower (one Client's, for its observers) and its hub */
bit woken;              /* its waiter's wake-up, pending (one is kept) */
bit down;               /* its hub's connection is down: messages are lost */
bit fasleep;            /* it read the leader and is not woken since */
#ifdef PROGRESS
byte ct, cvt;           /* cur: the state it passed on last */
bit cver, fhas;
bit stay;               /* campaigner 0's last campaign leads for good */
byte ftimer;            /* its timer, when armed */
bit farmed;

/* Observers: 0 from the start, 1 joins at any time */
#define OBS 2
byte ot[OBS], ovt[OBS], otop[OBS];   /* the term and value sent last, and
                                        the highest term sent */
bit over[OBS];
bit joined;
#endif

#include "world.pml"

/* changed asserts, after a script changed the leader or its value, that
   a follower that read the old one is woken, or will be (its hub's
   connection is down, and wakes it once back). */
#define changed() assert(woken || down || !fasleep)

/* pub publishes on the Election's channel: it wakes the follower, whose
   hub may lose it only by losing its connection. */
#ifdef PROGRESS
inline pub() {
  if
  :: down
  :: !down -> woken = 1
  :: !down && losses > 0 -> losses--; down = 1
  fi
}
#else
/* In the safety checks it is never lost: a message lost with the
   connection is one whose wake-up comes when the hub is back, and the
   follower may be that slow anyway. */
#define pub() woken = 1
#endif

/* free deletes the owner key. */
inline free() {
  owner = 0; ttl = 0; term = 0; vterm = 0; vver = 0
}

/* issue is issue_fence: the next term, max(last + 1, now), above the
   last whether or not the server's clock (µs) has passed it. */
inline issue(f) {
#ifdef BROKEN_FENCE
  if
  :: f = fkey + 1                   /* the clock has passed the last */
  :: f = fkey                       /* max(last, now): in the same µs */
  fi;
#else
  f = fkey + 1;
#endif
  assert(f > fkey);
  fkey = f
}

/* handOver is hand_over: the lock just let go goes to a live waiter,
   any one (mutex.pml checks it is the first), until its liveness
   deadline, with a new term and the value it campaigned with; its
   message "<tok> <fence> <µs>" tells the waiter, and the "leader" that
   queue_release.lua sends after it wakes the follower (one message
   modelled: the follower wakes for any payload). heir is 0 when nobody
   lives to take it. */
inline handOver() {
  heir = 0;
  k = 1;
  do
  :: k < NT && alive[k] > 0 -> heir = k; k++
  :: k < NT && alive[k] > 0 && heir != 0 -> k++   /* one ahead keeps it */
  :: k < NT && alive[k] == 0 -> k++
  :: else -> break
  od;
  k = 0;
  if :: fkey == TERMS -> heir = 0 :: else fi;     /* terms spent */
  if
  :: heir != 0 ->
     issue(f);
     owner = heir; ttl = alive[heir]; term = f; vterm = f; vver = 0;
     alive[heir] = 0;
#ifndef BROKEN_HANDOVER
     pub();
#endif
     if
     :: gtok[CLIENT(heir)] = heir; gl[CLIENT(heir)] = ttl; gf[CLIENT(heir)] = f
     :: LOSE
     fi
  :: else
  fi
}

/* mayTake is may_take: a free lock goes to t when nobody lives in the
   queue, or t is queued (it may be first: FIFO is mutex.pml's). */
inline mayTake(t, may) {
  may = (alive[t] > 0);
  k = 1;
  do
  :: k < NT && k != t && alive[k] > 0 -> break   /* another waits */
  :: k < NT && (k == t || alive[k] == 0) -> k++
  :: k == NT -> may = 1; break
  od;
  if :: fkey == TERMS -> may = 0 :: else fi;      /* terms spent */
  k = 0
}

/* acquire is queue_acquire.lua for an Election: ok and f, the term, when
   t leads; a lock taken is announced. */
inline acquire(t) {
  ok = 0;
  if
  :: owner == t ->                       /* sent again (retried): PEXPIRE GT */
     if :: ttl < T -> ttl = T :: else fi;
     f = term; ok = 1; pub()
  :: owner == 0 ->
     mayTake(t, ok);
     if
     :: ok ->
        alive[t] = 0;
        issue(f);
        owner = t; ttl = T; term = f; vterm = f; vver = 0;
        pub(); changed()
     :: else -> alive[t] = LIVE          /* join */
     fi
  :: owner != 0 && owner != t -> alive[t] = LIVE
  fi
}

/* release is queue_release.lua for an Election: a lock left free or
   handed over is announced. */
inline release(t) {
  if
  :: owner == t ->
     free(); handOver();
     if :: heir == 0 -> pub() :: else fi;
     changed()
  :: else
  fi;
  heir = 0; f = 0
}

/* leave is queue_leave.lua: out of the queue; a lock t held is let go
   as release does; a free lock t was first for (it may have been) goes
   to the next. */
inline leave(t) {
  was = (alive[t] > 0);
  alive[t] = 0;
  if
  :: owner == t ->
     free(); handOver();
     if :: heir == 0 -> pub() :: else fi;
     changed()
  :: owner == 0 && was -> handOver(); if :: heir != 0 -> changed() :: else fi
  :: else
  fi;
  heir = 0; was = 0; f = 0
}

/* renew is refresh_owner for an Election: a lease brought nearer its
   end is announced, for followers wake at the end they read. */
inline renew(t) {
  ok = (owner == t);
  if
  :: ok ->
#ifndef BROKEN_SOONER
     if :: ttl > T -> pub() :: else fi;
#endif
     ttl = T
  :: else
  fi
}

/* proclaim is elect_proclaim.lua: t's new value, announced by the
   leader of term f (its Lease.Fence), in place of the owner key's;
   term, start and TTL stay. */
inline proclaim(t, f) {
#ifdef BROKEN_PROCLAIM
  ok = (owner != 0)                     /* any leader's value */
#else
  ok = (owner == t)
#endif
  ;
  if
  :: ok -> vterm = f; vver = 1; pub(); changed()
  :: else
  fi
}

/* granted asserts that campaigner i, leading from this step, is the
   only one whose leadership has not passed its deadline; it leads for
   HOLD. */
inline granted(i) {
  endWait();
  assert(lead[i] > 0);
  j = 0;
  do
  :: j < N -> assert(j == i || lead[j] == 0); j++
  :: else -> break
  od;
  j = 0;
  hold[i] = HOLD; pv[i] = 0;
#ifdef PROGRESS
  if
  :: i == 0 && g == ACQ -> stay = 1             /* leads for good */
  :: skip
  fi
#endif
}

/* A campaigner: Campaign, then lead (renew, Proclaim once) and Resign.
   It may try again at any time (a message, its timer, a heartbeat's
   "try now", an error); with PROGRESS once a tick, which stands for its
   heartbeat's "try now" and its timer. A waiter's tries keep its place
   (its heartbeats are left out: a place that lapses is taken again by
   the next try). */
proctype campaigner(byte i) {
  byte g, t, j, k, f, heir;
  bit ok, was;
try:
  atomic {
    if
    :: g == (i == 0 -> ACQ : ACQ1) -> goto done
    :: else
    fi;
    t = i * ACQ + g + 1; g++;
    gtok[i] = 0; gl[i] = 0; gf[i] = 0
  }
again:
  el[i] = 1;                                    /* a try sent */
  if
  :: atomic { acquire(t) }
  :: LOSE -> el[i] = 0; tryNow(); goto waiting  /* lost, or timed out */
  :: CRASH(i) -> goto crash
  fi;
  if
  :: LOSE -> atomic { ok = 0; f = 0; el[i] = 0; tryNow(); goto waiting }  /* reply lost */
  :: CRASH(i) -> goto crash
  :: atomic { ok && el[i] > T -> ok = 0; f = 0; el[i] = 0; tryNow(); goto waiting }  /* late */
  :: atomic { ok && el[i] <= T -> lead[i] = T + 1 - el[i]; fence[i] = f; ok = 0; f = 0; el[i] = 0; granted(i); goto held }
  :: atomic { !ok -> el[i] = 0; sleep(1) }    /* refused */
  fi;
waiting:
  do
#ifdef PROGRESS
  :: atomic { armed[i] && timer[i] == 0 -> goto again }
#else
  :: goto again
#endif
  :: atomic {                                   /* handedOver */
       gtok[i] == t -> lead[i] = gl[i]; fence[i] = gf[i];
       gtok[i] = 0; gl[i] = 0; gf[i] = 0;
       granted(i); goto held
     }
  :: GIVEUP(i) -> atomic { endWait(); if :: leave(t) :: LOSE fi; goto try }
  :: CRASH(i) -> goto crash
  od;
held:
  do
  :: lead[i] == 0 -> goto lost                  /* Lost() */
  :: hold[i] == 0 -> break                      /* Resign */
  :: lead[i] > 0 && lead[i] != T && hold[i] > 0 ->
     /* a renewal: as the lease nears its end, or at once after a
        hand-over whose lease is longer than the TTL */
     atomic {
       en[i] = 1;
#ifndef BROKEN_INFLIGHT
       /* the deadline counts the renewal as one Redis may apply */
       if :: T < lead[i] -> lead[i] = T :: else fi
#endif
     };
     if
     :: atomic { renew(t) }
        if
        :: atomic {
             if
#ifdef BROKEN_RENEW
             :: ok && lead[i] > 0 -> lead[i] = T /* from its reply */
#else
             :: ok && lead[i] > 0 && en[i] <= T -> lead[i] = T + 1 - en[i]
             :: ok && en[i] > T -> lead[i] = 0
#endif
             :: !ok -> lead[i] = 0              /* gone: Lost() */
             :: else
             fi;
             en[i] = 0; ok = 0
           }
        :: LOSE -> goto unknown
        fi
     :: LOSE -> goto unknown
     fi
  :: pv[i] == 0 && lead[i] > 0 && hold[i] > 0 ->
     pv[i] = 1;                                 /* Proclaim */
     if
     :: atomic { proclaim(t, fence[i]) }
        if
        :: atomic { !ok -> lead[i] = 0 }        /* ErrLost: Lost() */
        :: atomic { ok -> ok = 0 }
        :: LOSE -> ok = 0                       /* an error: nothing known */
        fi
     :: LOSE
     fi
  :: CRASH(i) -> goto crash
  od;
  atomic { lead[i] = 0; hold[i] = 0; fence[i] = 0; pv[i] = 0 };
  if
  :: atomic { release(t) }                      /* Resign */
  :: LOSE
  :: CRASH(i) -> goto crash
  fi;
  goto try;
unknown:
  /* a renewal's outcome unknown: Redis may have applied it, so the
     deadline is the earlier of the two (watchdog: earlier) */
  atomic {
    if
    :: en[i] > T -> lead[i] = 0
    :: en[i] <= T && T + 1 - en[i] < lead[i] -> lead[i] = T + 1 - en[i]
    :: else
    fi;
    en[i] = 0; ok = 0
  };
  goto held;
lost:
  atomic { hold[i] = 0; fence[i] = 0; pv[i] = 0 };
#ifdef PROGRESS
  if :: i == 0 -> stay = 0 :: else fi;
#endif
  if
  :: atomic { release(t) }                      /* Resign after Lost() */
  :: true
  fi;
  goto try;
crash:
  atomic { endWait(); lead[i] = 0; hold[i] = 0; en[i] = 0; el[i] = 0; ok = 0; f = 0; fence[i] = 0; pv[i] = 0 };
  goto try;
done:
}

#ifdef PROGRESS
/* send is observer.send: ld unless it is what was sent last, or an
   older term; monotonic asserts the filter never has to drop one. */
inline send(o, rt, rvt, rv) {
  if
  :: ot[o] == rt && ovt[o] == rvt && over[o] == rv
  :: else ->
     assert(rt == 0 || rt >= otop[o]);
     if
     :: rt != 0 && rt < otop[o]
     :: else ->
        ot[o] = rt; ovt[o] = rvt; over[o] = rv;
        if :: rt > otop[o] -> otop[o] = rt :: else fi
     fi
  fi
}
#endif

/* The follower: read the leader (elect_leader.lua), pass it on, sleep
   until woken or its timer; an error backs off. Its waiter is
   subscribed before its first read, and stays. */
#ifdef PROGRESS
active proctype follower() {
  byte rterm, rvterm, rttl;
  bit rver;
read:
  if
  :: atomic {
       assert(term == 0 || vterm == term);
       rterm = term; rvterm = vterm; rver = vver; rttl = ttl; fasleep = 1
     }
     if
     :: atomic {                                /* pass */
          ct = rterm; cvt = rvterm; cver = rver; fhas = 1;
          send(0, rterm, rvterm, rver);
          if :: joined -> send(1, rterm, rvterm, rver) :: else fi;
#ifndef BROKEN_TIMER
          if                                    /* until the lease's end */
          :: rterm != 0 -> ftimer = rttl; farmed = 1
          :: else
          fi;
#endif
          rterm = 0; rvterm = 0; rver = 0; rttl = 0
        }
     :: LOSE -> atomic {                        /* reply lost: back off */
          fasleep = 0; rterm = 0; rvterm = 0; rver = 0; rttl = 0;
          ftimer = 1; farmed = 1
        }
     fi
  :: LOSE -> atomic { ftimer = 1; farmed = 1 }  /* an error: back off */
  fi;
  do
  :: atomic { woken -> woken = 0; fasleep = 0; farmed = 0; ftimer = 0; goto read }
  :: atomic { farmed && ftimer == 0 -> farmed = 0; fasleep = 0; goto read }
  od
}
#else
/* In the safety checks the follower reads at any time (its timer, an
   error's back-off), in one step with its reply (a read is one script;
   what the reply tells is what Redis held when it ran), and keeps of
   what it read only that it read it; the observers are PROGRESS's. */
active proctype follower() {
  do
  :: atomic {                                   /* a read, passed on */
       assert(term == 0 || vterm == term);
       fasleep = 1
     }
  :: atomic { woken -> woken = 0; fasleep = 0 } /* woken: it reads again */
  od
}
#endif



/* The clock: one tick (see TICK in world.pml). */
active proctype clock() {
  byte k;
  do
  :: atomic {
       TICK;
       k = 1;
       do
       :: k < NT -> dec(alive[k]); k++
       :: else -> break
       od;
       k = 0;
       do
       :: k < N ->
          dec(lead[k]);
#ifdef PROGRESS
          if :: k == 0 && stay :: else -> dec(hold[k]) fi;
#else
          dec(hold[k]);
#endif
          dec(gl[k]); if :: gl[k] == 0 -> gtok[k] = 0; gf[k] = 0 :: else fi;
#ifdef PROGRESS
          dec(timer[k]);
#endif
          inc(el[k], T); inc(en[k], T);
          k++
       :: else -> break
       od;
       k = 0;
#ifdef PROGRESS
       dec(ftimer);
#endif
       if
       :: ttl > 0 ->
          ttl--;
          if
          :: ttl == 0 ->                        /* the lease runs out: silent */
#ifdef PROGRESS
             assert(ftimer == 0 || !farmed || woken || down || !fasleep);
#endif
             free()
          :: else
          fi
       :: else
       fi;
       faults(k)
     }
  od
}

#ifdef RESTART
/* Redis restarts once without persistence: its data is gone. The fence
   key too, but issue_fence's next term is then the server's clock (µs),
   past every term issued before: fkey stays, standing for it. */
active proctype restart() {
  byte k;
  atomic {
    free();
    k = 0;
    do
    :: k < NT -> alive[k] = 0; k++
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
    :: i < N -> run campaigner(i); i++
    :: else -> break
    od
  };
#ifdef PROGRESS
  /* A second Observe of the same election on the follower's Client,
     at any time: join sends it the state read last, if any. */
  atomic {
    joined = 1;
    if :: fhas -> send(1, ct, cvt, cver) :: else fi
  };
  /* The follower's hub: its connection, once back and resubscribed,
     wakes every waiter (a confirmation after a disruption: wakeAll). */
  do
  :: atomic {
       down -> down = 0;
#ifndef BROKEN_RESUB
       woken = 1
#else
       skip
#endif
     }
  od
#endif
}

#ifdef PROGRESS
/* The observers end up reporting, for good, who leads in Redis. */
#define agree(o) (ot[o] == term && ovt[o] == vterm && over[o] == vver)
ltl following { <> [] (joined && agree(0) && agree(1)) }
#endif
