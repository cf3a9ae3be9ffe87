/*
 * world.pml: what every model shares of the world around the protocol
 * (docs/model.md): lost messages, crashes, give-ups, and the clock's
 * tick. A model includes it after defining N, its number of clients.
 *
 * Safety checks (no PROGRESS): any message, request or reply may be
 * lost; one client may crash and one waiter give up; time may pass
 * between any two steps (TICK is always enabled).
 * PROGRESS: client 0, the one whose progress is checked, neither
 * crashes nor gives up; two losses in all (a run that loses every
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
#ifdef PROGRESS
byte losses = 2;
#define LOSE      atomic { losses > 0 -> losses-- }
#define CRASH(i)  atomic { i != 0 && crashes > 0 -> crashes-- }
#define GIVEUP(i) atomic { i != 0 && giveups > 0 -> giveups-- }
#define TICK      timeout
#else
#define LOSE      true
#define CRASH(i)  atomic { crashes > 0 -> crashes-- }
#define GIVEUP(i) atomic { giveups > 0 -> giveups-- }
#define TICK      true
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
