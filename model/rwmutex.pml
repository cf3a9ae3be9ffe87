/*
 * rwmutex.pml: the RWMutex protocol, checked with spin for exclusion
 * between a writer and anyone else, under both modes and a mix of them,
 * and for progress of a writer and of a reader (model_test.go runs it;
 * docs/model.md says what it covers and leaves out).
 *
 * It mirrors, and must change with:
 *   lua/rw_rlock.lua        a read share's try
 *   lua/rw_lock.lua         a writer's try, which joins the writers' line
 *                           (with an intention, PreferWriters) when
 *                           refused; with join 2, a writer's heartbeat
 *   lua/rw_unlock.lua       a writer's Unlock: next_writer
 *   lua/rw_runlock.lua      a reader's Unlock: the last one lets the
 *                           first writer in (next_writer)
 *   lua/rw_leave.lua        a writer that gives up
 *   lua/rw_rrefresh.lua     a read share's renewal
 *   lua/owner_refresh.lua   a writer's renewal
 *   lua/lib/writers.lua     next_writer: the first live writer is handed
 *                           the lock, or only woken while newcomers may
 *                           barge in or (a writer's release) it has no
 *                           intention; readers are woken by "all" unless
 *                           a writer was handed the lock
 *   lua/lib/waiters.lua     the writers' line, as mutex.pml has it
 *   rwmutex.go, wait.go     readers wait for "all" or their timer, with
 *                           no heartbeat and no hand-off; writers wait as
 *                           a Mutex's waiters do (handedOver)
 *   internal/watchdog       a lease's deadline, sent + TTL: Lost() then
 *
 * The world is mutex.pml's (world.pml): a clock whose ticks count every
 * timer down, clients paused between any two steps, requests run late or
 * never, replies and messages lost, one crash and one give-up. Each
 * acquisition of a client is a read share or the write side, chosen
 * anew each time (with PROGRESS, client 0 always writes, or with
 * READER0 always reads).
 *
 * Modes (the calling side's policy, per client): PreferWriters for all
 * (the default), PREFER_READERS for all, or MIXED (client 0 prefers
 * writers, the others readers). A PreferWriters writer that waits holds
 * an intention, renewed with its place in the line; a PreferWriters
 * reader does not start while one lives.
 *
 * Properties, asserted at every grant, by a try's reply or a hand-off:
 *   exclusion  a writer granted: no other client holds a lease whose
 *              deadline has not passed; a reader granted: no other
 *              client holds the write side so;
 *   writers first  a PreferWriters reader takes no share while a
 *              PreferWriters writer waits in the line (as rw_rlock
 *              runs: its promise is about Redis' order);
 *   order      a writer that takes the lock by its try passes no live
 *              writer that has waited past its barging window.
 * With PROGRESS, the ltl formula progress: client 0, which neither
 * crashes nor gives up, gets the lock whenever it wants it, under weak
 * fairness, with two losses in all.
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
#define T 3             /* lease TTL, in ticks */
#define LIVE 2          /* writer liveness: also a hand-off's lease */
#define HOLD 1          /* ticks a holder keeps the lock before Unlock */
#define STARVE 1        /* a newcomer writer may barge while the first
                           writer has waited less (mutexStarve) */
#define CLIENT(t) (((t) - 1) / ACQ)

/* PW(i): client i prefers writers. */
#if defined(PREFER_READERS)
#define PW(i) 0
#elif defined(MIXED)
#define PW(i) ((i) == 0)
#else
#define PW(i) 1
#endif

/* ROLE(i): what client i's acquisitions take: WRITES, READS, or
   EITHER, chosen anew each time. By default every client does either;
   with PROGRESS, client 0 writes (READER0: reads). */
#define WRITES 0
#define READS 1
#define EITHER 2
#if defined(PROGRESS) && defined(READER0)
#define ROLE(i) ((i) == 0 -> READS : EITHER)
#elif defined(PROGRESS)
#define ROLE(i) ((i) == 0 -> WRITES : EITHER)
#else
#define ROLE(i) EITHER
#endif

mtype = { wake, grant, all };

/* Redis */
byte owner;             /* the owner key: a writer's token, or a lone
                           reader's (lone); 0: free */
bit lone;               /* the owner key holds a lone reader's share */
byte ttl;               /* its PTTL */
byte rd[NT];            /* a token's read share left; 0: none (a share
                           past its deadline counts as gone: every
                           script that reads the readers prunes first) */
byte intent[NT];        /* a writer's intention left; 0: none */
byte q[NT];             /* the writers' line in arrival order */
byte alive[NT];         /* a writer's liveness left; 0: past it */
byte age[NT];           /* a writer's barging window left */
chan inbox[N] = [1] of { mtype, byte };  /* pub/sub, by the hub */

/* Clients, by index */
byte lease[N];          /* ticks to the lease's deadline; > 0 while held */
bit reading[N];         /* the acquisition is a read share */
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
       :: ttl > 0 -> ttl--; if :: ttl == 0 -> owner = 0; lone = 0 :: else fi
       :: else
       fi;
       k = 1;
       do
       :: k < NT -> dec(rd[k]); dec(intent[k]); dec(alive[k]); dec(age[k]); k++
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

/* The writers' line (queue.pml): a token that leaves it loses its
   barging window too. */
#define dropped(t) age[t] = 0
#include "queue.pml"

/* join puts t at the end of the line unless it is in it, and renews its
   liveness (join_queue), and its intention when it holds one. */
inline join(t, intend) {
  qfind(t, k);
  if
  :: q[k] != t -> q[k] = t; age[t] = STARVE
  :: else
  fi;
  alive[t] = LIVE;
  if :: intend -> intent[t] = LIVE :: else fi;
  k = 0
}

/* readers sets n to the ticks left to the first read share to end, 0
   when no live reader holds the lock (the scripts prune readers first);
   intents sets n to the last intention's, 0 when none lives. */
inline readers(n) {
  n = 0; j = 1;
  do
  :: j < NT -> if :: rd[j] > 0 && (n == 0 || rd[j] < n) -> n = rd[j] :: else fi; j++
  :: else -> break
  od;
  j = 0
}
inline intents(n) {
  n = 0; j = 1;
  do
  :: j < NT -> if :: intent[j] > n -> n = intent[j] :: else fi; j++
  :: else -> break
  od;
  j = 0
}

#include "inbox.pml"

/* wakeReaders sends "all" on the readers' channel: each client waiting
   for a read share hears it, unless it is lost. */
inline wakeReaders() {
  j = 0;
  do
  :: j < N ->
     if
     :: reading[j] && lease[j] == 0 ->
        if
        :: nfull(inbox[j]) -> inbox[j]!all, 0
        :: full(inbox[j])
        :: LOSE
        fi
     :: else
     fi;
     j++
  :: else -> break
  od;
  j = 0
}

/* nextWriter is next_writer, with wr its wake_readers (a writer let go).
   The first live writer is handed the lock, or only woken (it and, with
   wr, the readers) while newcomers may barge in, or when wr and it holds
   no intention (the code reads that of the first writer before the dead
   are pruned: a dead first writer's may still be in Redis, or not: so
   either; first says "only wake"). */
inline nextWriter(wr) {
  head = q[0];
  if
  :: wr && head != 0 && alive[head] == 0 -> if :: first = 1 :: first = 0 fi
  :: wr && head != 0 && alive[head] > 0 && intent[head] == 0 -> first = 1
  :: else -> first = 0
  fi;
  if
  :: q[0] != 0 && alive[q[0]] == 0 -> prune()  /* only when the first is dead */
  :: else
  fi;
  if
  :: q[0] == 0 -> if :: wr -> wakeReaders() :: else fi
  :: q[0] != 0 && (age[q[0]] > 0 || first) ->
     publish(wake, q[0]);
     if :: wr -> wakeReaders() :: else fi
  :: q[0] != 0 && age[q[0]] == 0 && !first ->
     head = q[0];
     owner = head; lone = 0;
     ttl = alive[head];   /* until its liveness deadline (PXAT) */
     qremove(head, first);
     intent[head] = 0;
     publish(grant, head)
  fi;
  head = 0; first = 0
}

#ifdef BROKEN_BARGE
#define mayTake(t) true         /* a free lock to whoever asks */
#else
#define mayTake(t) (q[0] == 0 || q[0] == t || age[q[0]] > 0)
#endif

/* writerOrder asserts that writer t, taking the lock by its try, passes
   no live writer in the line that has waited past its barging window
   (writers go in arrival order, as the RWMutex promises). */
inline writerOrder(t) {
  j = 0;
  do
  :: j < NT - 1 && q[j] != 0 && q[j] != t -> assert(alive[q[j]] == 0 || age[q[j]] > 0); j++
  :: else -> break
  od;
  j = 0
}

/* writerWait is a writer's refusal's wait: the holder's lease left, or
   the first reader's, or the first writer's liveness left. */
inline writerWait() {
  if
  :: owner != 0 -> wait = ttl
  :: owner == 0 && n > 0 -> wait = n
  :: else -> wait = alive[q[0]]
  fi
}

/* writersFirst asserts, as a reader that gives way (gw) takes a share,
   that no writer which asks readers to give way waits in the line
   (alive): its intention lives exactly as long as its place. */
bit overtaken;
inline writersFirst(gw) {
  j = 0;
  do
  :: gw && j < NT - 1 && q[j] != 0 ->
     overtaken = (alive[q[j]] > 0 && PW(CLIENT(q[j])));
     assert(!overtaken);
     j++
  :: else -> break
  od;
  j = 0
}

/* rlock is rw_rlock.lua: a reader that gives way (gw) waits while an
   intention lives. A reader alone keeps its share in the owner key
   (lone): when no share is live and none expired lingers unpruned in the
   readers' keys (then it may go either way here), and no intention
   stops it; the others keep theirs in rd, beside a lone reader too. */
inline rlock(t, gw) {
  ok = 0;
  intents(n);
#ifdef BROKEN_GIVEWAY
  n = 0;                                    /* intentions ignored */
#endif
  if :: !gw -> n = 0 :: else fi;
  readers(k);
  if
  :: owner == t -> ttl = T; ok = 1          /* a lone try sent again (GT) */
  :: owner != t && rd[t] > 0 -> rd[t] = T; ok = 1   /* a try sent again (GT) */
  :: owner != t && rd[t] == 0 && owner != 0 && !lone -> wait = ttl
  :: owner != t && rd[t] == 0 && (owner == 0 || lone) && n > 0 -> wait = n
  :: owner == 0 && rd[t] == 0 && n == 0 && k == 0 ->
     owner = t; lone = 1; ttl = T; ok = 1; writersFirst(gw)
  :: owner != t && rd[t] == 0 && (owner == 0 || lone) && n == 0 ->
     rd[t] = T; ok = 1; writersFirst(gw)
  fi;
  n = 0; k = 0
}

/* wlock is rw_lock.lua with join: ok, or the wait and kill of a
   refusal. */
inline wlock(t, intend) {
  ok = 0;
  readers(n);
  if
  :: owner == t -> ttl = T; ok = 1          /* a try sent again */
  :: owner != t ->
     if :: owner == 0 -> prune() :: else fi;   /* a writer holds: no prune */
     if
#ifdef BROKEN_READERS
     :: owner == 0 && mayTake(t) ->         /* readers not counted */
#else
     :: owner == 0 && n == 0 && mayTake(t) ->
#endif
        writerOrder(t);
        qremove(t, first); intent[t] = 0; owner = t; ttl = T; ok = 1
     :: else -> join(t, intend); writerWait(); refused(t, kill)
     fi
  fi;
  n = 0
}

/* wbeat is rw_lock.lua with join 2, a writer's heartbeat: ok (try now),
   or the wait and kill of a refusal. */
inline wbeat(t, intend) {
  ok = 0;
  readers(n);
  if
  :: owner == t -> ok = 1
  :: owner != t ->
     if :: owner == 0 -> prune() :: else fi;   /* a writer holds: no prune */
     qfind(t, k);
     if
     :: owner == 0 && n == 0 && mayTake(t) -> ok = 1
     :: q[k] != t -> ok = 1                 /* dropped from the line */
     :: else ->
        alive[t] = LIVE;
#ifndef BROKEN_BEATINTENT
        if :: intend -> intent[t] = LIVE :: else fi;
#endif
        writerWait(); refused(t, kill)
     fi;
     k = 0
  fi;
  n = 0
}

/* wunlock is rw_unlock.lua. */
inline wunlock(t) {
#ifdef BROKEN_RELEASE
  if :: owner != 0 -> owner = 0; lone = 0; ttl = 0; nextWriter(1) :: else fi
#else
  if :: owner == t -> owner = 0; ttl = 0; nextWriter(1) :: else fi
#endif
}

/* runlock is rw_runlock.lua: the last reader lets the first writer in,
   a lone reader (owner == t) or one of the others; while a lone reader
   holds, the others' last lets nobody in (the script stops on any holder
   of the owner key: only a lone reader can be there while a share
   lived, and the model lets the rest through, so that a release without
   the share check still shows). */
inline runlock(t) {
  if
  :: owner == t ->
     owner = 0; lone = 0; ttl = 0;
     readers(n);
     if :: n == 0 -> nextWriter(0) :: else fi
#ifdef BROKEN_RUNLOCK
  :: owner != t ->                          /* no share check */
#else
  :: owner != t && rd[t] > 0 ->
#endif
     rd[t] = 0;
     readers(n);
#ifdef BROKEN_LAST
     nextWriter(0)                          /* though readers remain */
#else
#ifdef BROKEN_LONE
     if :: n == 0 -> nextWriter(0) :: else fi   /* though a lone reader holds */
#else
     if :: n == 0 && !(owner != 0 && lone) -> nextWriter(0) :: else fi
#endif
#endif
  :: else
  fi;
  n = 0
}

/* wleave is rw_leave.lua: a writer gives up. */
inline wleave(t) {
  qremove(t, first);
  wait = intent[t];                         /* it held an intention */
  intent[t] = 0;
  if
  :: owner == t -> owner = 0; ttl = 0; first = 1
  :: else
  fi;
  readers(n);
#ifdef BROKEN_LEAVE
  n = 0;                                    /* readers not looked at */
#endif
  if
#ifdef BROKEN_LEAVEOWNER
  :: first && n == 0 -> nextWriter(1)       /* though a writer holds it */
#else
  :: first && owner == 0 && n == 0 -> nextWriter(1)
#endif
  :: else ->
     intents(n);
     if :: wait > 0 && n == 0 && (owner == 0 || lone) -> wakeReaders() :: else fi
  fi;
  first = 0; wait = 0; n = 0
}

/* granted asserts that client i, granted the lock at this step, shares
   it with nobody whose lease has not run out, readers with readers
   only, and ends its wait; i holds it for HOLD. */
inline granted(i) {
  endWait();
  assert(lease[i] > 0);
  j = 0;
  do
  :: j < N -> assert(j == i || lease[j] == 0 || (reading[i] && reading[j])); j++
  :: else -> break
  od;
  j = 0;
  hold[i] = HOLD
}

/* mine: a message in the inbox is for this acquisition: a hand-off or
   wake-up for the writer's token, "all" for a reader. */
#define mine(t) (inbox[i]?[grant, eval(t)] || inbox[i]?[wake, eval(t)] || (reading[i] && inbox[i]?[all, 0]))

/* A client's acquisitions, each a read share or the write side. A
   waiter may try again at any time (safety); a writer keeps its place
   by its tries and heartbeats, as a Mutex's waiter does; a reader waits
   for "all" or its timer. */
proctype client(byte i) {
  byte g, t, j, k, n, head, wait, kill;
  bit ok, first;
try:
  atomic {
    if
    :: g == ACQ -> goto done
    :: else
    fi;
    t = i * ACQ + g + 1; g++;
    er[i] = 0; drain(i);
    if
    :: ROLE(i) != READS -> reading[i] = 0
    :: ROLE(i) != WRITES -> reading[i] = 1
    fi;
    wanted()
  }
again:
  el[i] = 1;                                    /* a try sent */
  if
  :: atomic { if :: reading[i] -> rlock(t, PW(i)) :: else -> wlock(t, PW(i)) fi }
  :: LOSE -> el[i] = 0; tryNow(); goto waiting  /* lost, or timed out */
  :: CRASH(i) -> goto crash
  fi;
  if
  :: LOSE -> atomic { ok = 0; kill = 0; wait = 0; el[i] = 0; tryNow(); goto waiting }  /* reply lost */
  :: CRASH(i) -> goto crash
  :: atomic { ok && el[i] > T -> ok = 0; el[i] = 0; tryNow(); goto waiting }  /* late */
  :: atomic { ok && el[i] <= T -> lease[i] = T + 1 - el[i]; ok = 0; el[i] = 0; er[i] = 0; granted(i); goto held }
  :: atomic {                                   /* s.refused */
       !ok ->
       if :: !reading[i] -> er[i] = el[i] :: else fi;
       el[i] = 0; stale(t, kill); kill = 0; sleep(wait); wait = 0
     }
  fi;
waiting:
  do
  :: atomic { inbox[i]?[wake, eval(t)] -> inbox[i]?wake, eval(t); goto again }
  :: atomic { reading[i] && inbox[i]?[all, 0] -> inbox[i]?all, 0; goto again }
#ifdef PROGRESS
  :: atomic { armed[i] && timer[i] == 0 -> goto again }
  :: atomic {                                   /* a writer's heartbeat */
       !reading[i] && due[i] == 0 -> due[i] = BEAT;
       wbeat(t, PW(i));
       if
       :: ok -> ok = 0; wait = 0; tryNow()
       :: else -> er[i] = 1; beatStale(t, kill); kill = 0; sleep(wait); wait = 0
       fi
     }
#else
  :: goto again
  :: atomic {                                   /* a writer's heartbeat */
       !reading[i] -> wbeat(t, PW(i));
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
  :: atomic { nempty(inbox[i]) && !mine(t) -> inbox[i]?_, _ }  /* for an old token */
  :: GIVEUP(i) ->
     atomic {
       endWait(); er[i] = 0;
       if
       :: reading[i] -> runlock(t)              /* a share taken unseen */
       :: !reading[i] -> wleave(t)
       :: LOSE
       fi;
       goto try
     }
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
     :: atomic {
          if
          :: reading[i] && owner == t -> ok = 1; ttl = T   /* a lone reader's */
          :: reading[i] && owner != t -> ok = (rd[t] > 0); if :: ok -> rd[t] = T :: else fi
          :: else -> ok = (owner == t); if :: ok -> ttl = T :: else fi
          fi
        }
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
  :: atomic { if :: reading[i] -> runlock(t) :: else -> wunlock(t) fi }
  :: LOSE
  :: CRASH(i) -> goto crash
  fi;
  goto try;
lost:
  hold[i] = 0;
  if
  :: atomic { if :: reading[i] -> runlock(t) :: else -> wunlock(t) fi }  /* Unlock after Lost() */
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
    owner = 0; lone = 0; ttl = 0;
    k = 0;
    do
    :: k < NT -> q[k] = 0; alive[k] = 0; age[k] = 0; rd[k] = 0; intent[k] = 0; k++
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
