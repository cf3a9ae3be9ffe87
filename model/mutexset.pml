/*
 * mutexset.pml: the MutexSet protocol (a pool of named mutexes), checked
 * with spin for exclusion per member and for the member asked for
 * (model_test.go runs it; docs/model.md says what it covers and leaves
 * out).
 *
 * It mirrors, and must change with:
 *   lua/set_acquire.lua     a try for a named member or any (the least
 *                           recently used free one, or the other free one
 *                           when a waiter ahead keeps that), which joins the set's
 *                           queue when refused; with ARGV[5]=2 a queued
 *                           waiter's heartbeat (try_now, or a refusal)
 *   lua/set_release.lua     a release: set_let_go
 *   lua/set_leave.lua       a waiter that gives up: out of the queue, and
 *                           what its token holds let go; if it was first,
 *                           the least recently used free member handed on
 *   lua/set_refresh.lua     a renewal
 *   lua/lib/set.lua         set_live (a lease that ran out leaves its
 *                           member free at once, its expiry its time of
 *                           last use: the LRU order), set_claim,
 *                           set_grant, set_first_for (the first live
 *                           waiter for the member or for any), set_hand_over
 *                           (the member to that waiter, or while it has
 *                           waited less than starve_us only a wake-up),
 *                           set_let_go
 *   lua/lib/waiters.lua     the queue: join, keep_place, prune, may_take
 *   mutexset.go             a waiter listens on the set's channel (any
 *                           member) or the member's; a hand-off is
 *                           published on that channel, keyed by token, and
 *                           names the member
 *   wait.go                 the waiter: its refusals, handedOver (the
 *                           member from the message)
 *   acquire.go              a try's reply, late or in time
 *   internal/watchdog       a lease's deadline, sent + TTL: Lost() then
 * Left out: set_add.lua and set_remove.lua (membership changes, with the
 * "all" wake-up of a member removed while held); the set has two members
 * throughout.
 *
 * The world is mutex.pml's (world.pml): time is a clock process whose
 * ticks count every timer down at once; a request runs at Redis as one
 * atomic step some ticks after it was sent, or never; its reply comes some
 * ticks later, or never; a pub/sub message may be lost; a waiter may try
 * again at any time; one client may crash at any step and one waiter give
 * up, each starting again with a new token. Redis keeps its data, unless
 * RESTART is set. Each client asks, with every token, for what ask[] says:
 * client 1 for any member, the others for member A (1); see ASK.
 *
 * Properties, asserted at every grant, by a try's reply or a hand-off:
 *   granted    no other client holds the same member with a lease whose
 *              deadline has not passed (one that has passed has seen
 *              Lost());
 *   asked      a client that named a member holds that member;
 *   fifo       (at Redis, when a try takes a member) no live waiter ahead
 *              of the taker (all of them for a newcomer) that would take
 *              that member has waited past its barging window, but one
 *              that the other free member is kept for (the MutexSet's
 *              promise: a newcomer barges in only while the waiter first
 *              for the member has waited under starve_us, and takes a
 *              free member no waiter ahead would take).
 * With PROGRESS, the ltl formula progress: client 0, which asks for
 * member A and neither crashes nor gives up, gets it whenever it wants
 * it, under weak fairness, with two losses in all (as mutex.pml).
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
#define M 2             /* members 1 (A) and 2 (B); 0: none, or any */
#ifndef T
#define T 3             /* lease TTL, in ticks */
#endif
#define LIVE 2          /* waiter liveness timeout: also a hand-off's lease */
#define HOLD 1          /* ticks a holder keeps its member before release */
#define STARVE 1        /* mutexStarve: a newcomer may barge while the
                           waiter first for the member has waited less */
#define CLIENT(t) (((t) - 1) / ACQ)
/* ASK is what client i asks for: 0 any member, else the member named. */
#ifndef ASK
#define ASK(i) ((i) == 1 -> 0 : 1)
#endif

mtype = { wake, grant };

/* Redis */
byte owner[M + 1];      /* the held hash: the token of the member's last
                           lease, and its entry; 0: none */
byte ttl[M + 1];        /* the pool: its lease's time left; 0 with an
                           owner: ran out, and the member is free */
byte lru = 1;           /* the pool's order among free members: the one
                           whose last use ended first (never used: in
                           name order) */
byte q[NT];             /* the queue in arrival order, 0-terminated */
byte alive[NT];         /* a token's liveness left; 0: past its deadline */
byte age[NT];           /* a token's barging window left */
/* pub/sub, by the hub: { wake or grant, token, member granted } */
chan inbox[N] = [1] of { mtype, byte, byte };

/* Clients, by index */
byte ask[N];            /* what it asks for: ASK(i) */
byte mem[N];            /* the member it holds, or last held */
byte lease[N];          /* ticks to the lease's deadline; > 0 while held */
byte hold[N];           /* ticks left before the holder releases */
/* Elapsed ticks, plus one (0: nothing to count): */
byte el[N];             /* since the try in flight was sent */
byte er[N];             /* since the last refusal taken in was sent */
byte en[N];             /* since the renewal in flight was sent */

#include "world.pml"

/* scored notes that member m's time of last use is now fixed (its
   release, or its lease's expiry): the other member, if it has one,
   ended first and is the least recently used. A member has one while
   free or expired (ttl 0), and lru tells only while both have: until
   then it is kept at 1, to keep the states few. */
#define other(m) (M + 1 - (m))
#define scored(m) lru = (ttl[other(m)] == 0 -> other(m) : 1)

/* granting m to t for d ticks (set_grant): m leaves the free ones, whose
   order matters again only once both have a time of last use, which
   scored sets anew; lru is reset to keep the states few. */
#define grantTo(m, t, d) owner[m] = t; ttl[m] = d; lru = 1

/* told sets the wait a refusal tells; only a PROGRESS waiter sleeps on
   it (see sleep in world.pml). */
#ifdef PROGRESS
#define told(w) wait = w
#else
#define told(w) skip
#endif

/* The clock: one tick (see TICK in world.pml). A lease's expiry frees
   its member (set_live: the pool score is the expiry) and fixes its time
   of last use; its entries stay until the member is taken again, or let
   go by its token. */
active proctype clock() {
  byte k;
  do
  :: atomic {
       TICK;
       k = 1;
       do
       :: k <= M ->
          if
          :: ttl[k] > 0 -> ttl[k]--; if :: ttl[k] == 0 -> scored(k) :: else fi
          :: else
          fi;
          k++
       :: else -> break
       od;
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
   its liveness (join_queue); what it waits for is ask[CLIENT(t)]. */
inline join(t) {
  qfind(t, k);
  if
  :: q[k] != t -> q[k] = t; age[t] = STARVE
  :: else
  fi;
  alive[t] = LIVE;
  k = 0
}

/* wants tells whether waiter t would take member m: it waits for m or
   for any member (set_first_for). */
#define wants(t, m) (ask[CLIENT(t)] == 0 || ask[CLIENT(t)] == (m))

/* firstFor sets w to the first waiter that would take member m, looking
   at none from stop on and passing over pass (set_first_for); 0 when
   there is none. Dead waiters must have been pruned. */
inline firstFor(m, stop, pass, w) {
  w = 0;
  j = 0;
  do
  :: j < NT - 1 && q[j] != 0 && q[j] != stop && (q[j] == pass || !wants(q[j], m)) -> j++
  :: j < NT - 1 && q[j] != 0 && q[j] != stop && q[j] != pass && wants(q[j], m) -> w = q[j]; break
  :: else -> break
  od;
  j = 0
}

/* publish sends msg for t on the channel its waiter listens on (the
   set's, or its member's: the one its entry names, which set_hand_over
   publishes on); it may be lost, and is when the subscriber's buffer is
   full. */
inline publish(msg, t, m) {
  if
  :: nfull(inbox[CLIENT(t)]) -> inbox[CLIENT(t)]!msg, t, m
  :: full(inbox[CLIENT(t)])
  :: LOSE
  fi
}

/* isFree tells whether member m is free: never held, let go, or its
   lease ran out (set_live). */
#define isFree(m) (owner[m] == 0 || ttl[m] == 0)

/* lruFree sets m to the least recently used free member, 0 if none
   (ZRANGE pool 0 9, the free members first). */
inline lruFree(m) {
  if
  :: isFree(1) && isFree(2) -> m = lru
  :: isFree(1) && !isFree(2) -> m = 1
  :: !isFree(1) && isFree(2) -> m = 2
  :: else -> m = 0
  fi
}

/* mineOf sets m to the member t holds, expired or not (HGET held with
   the token's entry), 0 if none. */
inline mineOf(t, m) {
  if
  :: owner[1] == t -> m = 1
  :: owner[2] == t -> m = 2
  :: else -> m = 0
  fi
}

/* vacate ends member m's lease (set_let_go's ZADD LT and HDEL): a live
   one is used until now, an expired one was scored at its expiry. */
inline vacate(m) {
  if :: ttl[m] > 0 -> scored(m) :: else fi;
  owner[m] = 0; ttl[m] = 0
}

/* handOver gives member m, free now, to the first live waiter that
   would take it, or wakes that waiter while newcomers may still barge in
   (set_hand_over). */
inline handOver(m) {
  if
  :: q[0] == 0
  :: else ->
     prune();
#ifdef BROKEN_MATCH
     head = q[0];               /* the first waiter, whatever it waits for */
#else
     firstFor(m, 0, 0, head);
#endif
     if
     :: head == 0
     :: head != 0 && age[head] > 0 -> publish(wake, head, 0)
     :: head != 0 && age[head] == 0 ->
        grantTo(m, head, alive[head]);  /* until its liveness deadline (at least 1) */
        qremove(head, first);
        publish(grant, head, m)
     fi;
     head = 0; first = 0
  fi
}

/* letGo ends member m's lease and passes m on (set_let_go). */
inline letGo(m) {
  vacate(m);
  handOver(m)
}

/* refused notes, for a refusal of t's try or heartbeat, whether a grant
   for t waits unread: it was sent before this refusal, so the client
   that reads the refusal must not take it (handedOver's at < refusedAt). */
inline refused(t, kill) {
  kill = inbox[CLIENT(t)]??[grant, eval(t), _]
}

/* refuse is set_acquire's refuse: a try joins the queue, a heartbeat
   renews the place of a waiter queued (keep_place), and one no longer
   queued is told to try now; w is the wait the refusal tells. */
inline refuse(t, bt, w) {
  if
  :: !bt -> told(w); join(t); refused(t, kill)
  :: bt ->
     qfind(t, k);
     if
     :: q[k] == t -> told(w); alive[t] = LIVE; refused(t, kill)
     :: else -> ok = 1                      /* try now */
     fi;
     k = 0
  fi
}

/* fifo asserts that t, granted member m by its try, has no live waiter
   ahead of it in the queue (any, when t is a newcomer) that would take m
   and has waited past its barging window, but kept, the one kept the
   other free member (0: none). */
inline fifo(t, m, kept) {
  j = 0;
  do
  :: j < NT - 1 && q[j] != 0 && q[j] != t -> assert(!wants(q[j], m) || age[q[j]] > 0 || q[j] == kept); j++
  :: else -> break
  od;
  j = 0
}

/* take gives free member m to t (set_acquire's take), kept as for fifo:
   a heartbeat takes nothing and tells its waiter to try now. */
inline take(m, t, bt, kept) {
  ok = 1;
  if
  :: bt
  :: !bt -> fifo(t, m, kept); qremove(t, first); first = 0; grantTo(m, t, T); got = m
  fi
}

/* behind is set_acquire's ahead and behind for member m: refused while
   a waiter ahead of t would take m and has waited starve_us (may_take),
   else m is taken. */
#ifdef BROKEN_BARGE
#define mayTake(w) true         /* past whoever waits */
#else
#define mayTake(w) (w == 0 || age[w] > 0)
#endif
inline behind(m, t, bt) {
  firstFor(m, t, 0, head);
  if
  :: !mayTake(head) -> refuse(t, bt, alive[head])
  :: else -> take(m, t, bt, 0)
  fi;
  head = 0
}

/* anyBehind is behind for any member, m the least recently used free
   one: when a waiter ahead keeps m, the other member, if free, is taken
   unless a waiter ahead but that one would take it and has waited
   starve_us (set_acquire's loop over the free members, each waiter ahead
   keeping one). */
inline anyBehind(m, t, bt) {
  firstFor(m, t, 0, head);
  if
  :: mayTake(head) -> take(m, t, bt, 0)
  :: !mayTake(head) && !isFree(other(m)) -> refuse(t, bt, alive[head])
  :: !mayTake(head) && isFree(other(m)) ->
     firstFor(other(m), t, head, kept);
     if
     :: mayTake(kept) -> take(other(m), t, bt, head)
     :: else -> refuse(t, bt, alive[head])
     fi;
     kept = 0
  fi;
  head = 0
}

/* setAcquire is set_acquire.lua for token t of client i, a try (bt 0)
   or a heartbeat (bt 1): it sets ok (taken, or for a heartbeat try now)
   and got, the member taken, or the wait and kill of a refusal. */
inline setAcquire(t, bt) {
  ok = 0; got = 0;
  mineOf(t, m);
  if                                        /* its lease ran out unseen: */
  :: m != 0 && ttl[m] == 0 -> vacate(m); m = 0  /* the entry dropped */
  :: else
  fi;
  if
  :: m != 0 && bt -> ok = 1                 /* handed to the waiter */
  :: m != 0 && !bt ->                       /* a try sent again: GT */
     if :: ttl[m] < T -> ttl[m] = T :: else fi;
     ok = 1; got = m
  :: m == 0 ->
     prune();
     if
     :: ask[i] != 0 ->                      /* the member named */
        m = ask[i];
        if
        :: !isFree(m) -> refuse(t, bt, ttl[m])
        :: else -> behind(m, t, bt)
        fi
     :: ask[i] == 0 ->                      /* any member */
        lruFree(m);
        if
        :: m != 0 -> anyBehind(m, t, bt)
        :: m == 0 && ttl[1] <= ttl[2] -> refuse(t, bt, ttl[1])
        :: m == 0 && ttl[1] > ttl[2] -> refuse(t, bt, ttl[2])
        fi
     fi
  fi;
  m = 0
}

/* release is set_release.lua. */
inline release(t, m) {
#ifdef BROKEN_RELEASE
  if :: owner[m] != 0 -> letGo(m) :: else fi
#else
  if :: owner[m] == t -> letGo(m) :: else fi
#endif
}

/* leave is set_leave.lua: a waiter gives up. */
inline leave(t) {
  qremove(t, first);
  mineOf(t, m);
  if
  :: m != 0 -> first = 0; letGo(m)
  :: m == 0 && first -> first = 0; lruFree(m); if :: m != 0 -> handOver(m) :: else fi
  :: else
  fi;
  m = 0; first = 0
}

/* granted asserts that client i, granted member mem[i] at this step,
   holds the member it named, if it named one, and is the only holder of
   that member whose lease has not run out; it ends its wait, and i
   holds the member for HOLD. */
inline granted(i) {
  endWait();
  assert(lease[i] > 0);
  assert(ask[i] == 0 || mem[i] == ask[i]);
  j = 0;
  do
  :: j < N -> assert(j == i || lease[j] == 0 || mem[j] != mem[i]); j++
  :: else -> break
  od;
  j = 0;
  hold[i] = HOLD
}

/* drain drops what the client's subscription holds: a new token's
   waiter hears nothing sent for an old one. */
inline drain(i) {
  do
  :: inbox[i]?_, _, _
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
  :: kill && inbox[i]??[grant, eval(t), _] -> inbox[i]??grant, eval(t), _ \
  :: else \
  fi
#endif
#if defined(BROKEN_STALE) || defined(BROKEN_BEATSTALE)
#define beatStale(t, kill) skip
#else
#define beatStale(t, kill) stale(t, kill)
#endif

/* A client, as mutex.pml's: a waiter may try again at any time (for a
   message, its timer, a heartbeat's "try now", or a transient error);
   its tries and heartbeats keep its place and set the time its
   hand-off deadline counts from (s.refused). A hand-off names the
   member, and the client holds what it names. */
proctype client(byte i) {
  byte g, t, j, k, m, head, kept, wait, kill, got;
  bit ok, first;
try:
  atomic {
    if
    :: g == ACQ -> goto done
    :: else
    fi;
    t = i * ACQ + g + 1; g++;
    er[i] = 0; mem[i] = 0; drain(i);
    wanted()
  }
again:
  el[i] = 1;                                    /* a try sent */
  if
  :: atomic { setAcquire(t, 0) }
  :: LOSE -> el[i] = 0; tryNow(); goto waiting  /* lost, or timed out */
  :: CRASH(i) -> goto crash
  fi;
  if
  :: LOSE -> atomic { ok = 0; got = 0; kill = 0; wait = 0; el[i] = 0; tryNow(); goto waiting }  /* reply lost */
  :: CRASH(i) -> goto crash
  :: atomic { ok && el[i] > T -> ok = 0; got = 0; el[i] = 0; tryNow(); goto waiting }  /* late */
  :: atomic { ok && el[i] <= T -> lease[i] = T + 1 - el[i]; mem[i] = got; ok = 0; got = 0; el[i] = 0; er[i] = 0; granted(i); goto held }
  :: atomic { !ok -> er[i] = el[i]; el[i] = 0; stale(t, kill); kill = 0; sleep(wait); wait = 0 }  /* s.refused */
  fi;
  /* A try that met an error, or a late reply, sleeps before the next
     one as a refused one does: it may read a hand-off or a heartbeat's
     reply meanwhile. */
waiting:
  do
  :: atomic { inbox[i]?[wake, eval(t), _] -> inbox[i]?wake, eval(t), _; goto again }
#ifdef PROGRESS
  :: atomic { armed[i] && timer[i] == 0 -> goto again }
  :: atomic {                                   /* a heartbeat */
       due[i] == 0 -> due[i] = BEAT;
       setAcquire(t, 1);
       if
       :: ok -> ok = 0; tryNow()
       :: else -> er[i] = 1; beatStale(t, kill); kill = 0; sleep(wait)
       fi;
       wait = 0
     }
#else
  :: goto again
  :: atomic {                                   /* a heartbeat */
       setAcquire(t, 1);
       if
       :: ok -> ok = 0                          /* try now */
       :: else -> er[i] = 1; beatStale(t, kill); kill = 0
       fi;
       wait = 0
     }
#endif
  :: atomic {                                   /* handedOver */
       inbox[i]?[grant, eval(t), _] -> inbox[i]?grant, eval(t), mem[i];
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
       :: else -> mem[i] = 0; goto again
       fi
     }
  :: atomic {                                   /* for an old token */
       nempty(inbox[i]) && !inbox[i]?[grant, eval(t), _] && !inbox[i]?[wake, eval(t), _] -> inbox[i]?_, _, _
     }
  :: GIVEUP(i) -> atomic { endWait(); er[i] = 0; if :: leave(t) :: LOSE fi; goto try }
  :: CRASH(i) -> goto crash
  od;
held:
  do
  :: lease[i] == 0 -> goto lost                 /* Lost() */
  :: hold[i] == 0 -> break                      /* release */
  :: lease[i] == 1 && hold[i] > 0 ->            /* a renewal, as the
                                                   lease nears its end */
     en[i] = 1;
     if
     :: atomic {                                /* set_refresh */
          ok = (owner[mem[i]] == t && ttl[mem[i]] > 0);
          if :: ok -> ttl[mem[i]] = T :: else fi
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
  :: atomic { release(t, mem[i]); mem[i] = 0 }
  :: atomic { LOSE -> mem[i] = 0 }
  :: CRASH(i) -> goto crash
  fi;
  goto try;
lost:
  hold[i] = 0;
  if
  :: atomic { release(t, mem[i]); mem[i] = 0 }  /* release after Lost() */
  :: atomic { mem[i] = 0 }
  fi;
  goto try;
crash:
  atomic { endWait(); lease[i] = 0; hold[i] = 0; en[i] = 0; el[i] = 0; er[i] = 0; ok = 0; kill = 0; got = 0; wait = 0; mem[i] = 0 };
  goto try;
done:
}

#ifdef RESTART
/* Redis restarts once without persistence: its data is gone. */
active proctype restart() {
  byte k;
  atomic {
    k = 1;
    do
    :: k <= M -> owner[k] = 0; ttl[k] = 0; k++
    :: else -> break
    od;
    lru = 1;
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
    :: i < N -> ask[i] = ASK(i); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < N -> run client(i); i++
    :: else -> break
    od
  }
}

#ifdef PROGRESS
/* A client that neither crashes nor gives up, and wants a member, gets
   it (client 0 names member A). */
ltl progress { [] (want[0] -> <> (lease[0] > 0)) }
#endif
