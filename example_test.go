package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
)

// The examples run against the redis-server that TestMain starts at
// exampleAddr; in your code that is your Redis address.

func ExampleMutex_Lock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	lease, err := locks.Mutex("nightly-report").Lock(ctx)
	if err != nil {
		fmt.Println("not locked:", err)
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("holding", lease.Name())
	// Output: holding nightly-report
}

func ExampleMutex_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	// Do waits for the lock, runs the function, and unlocks. The function's
	// context is cancelled if the lease is lost, e.g. when Redis cannot be
	// reached to renew it.
	err := locks.Mutex("migrate-db", dlock.WithTTL(30*time.Second)).Do(ctx, func(ctx context.Context) error {
		fmt.Println("migrating, alone")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// migrating, alone
	// err: <nil>
}

func ExampleMutex_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	first, err := locks.Mutex("cron:cleanup").TryLock(ctx)
	if err != nil {
		fmt.Println(err) // another run has it, or Redis did not answer
		return
	}
	defer first.Unlock(ctx)

	// Another run of the job finds the lock taken and skips its turn.
	_, err = locks.Mutex("cron:cleanup").TryLock(ctx)
	if errors.Is(err, dlock.ErrNotAcquired) {
		fmt.Println("another run holds it; skipping")
	}
	// Output: another run holds it; skipping
}

func ExampleLease_Fence() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	a, _ := locks.Mutex("ledger").Lock(ctx)
	a.Unlock(ctx)
	b, _ := locks.Mutex("ledger").Lock(ctx)
	defer b.Unlock(ctx)

	// Send the fence with every write; the store keeps the highest fence it
	// has seen and refuses writes that carry a lower one.
	fmt.Println("later lease has a higher fence:", b.Fence() > a.Fence())
	// Output: later lease has a higher fence: true
}

func ExampleMutex_Status() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	m := locks.Mutex("deploy", dlock.WithMetadata("ci-runner-7"))
	lease, _ := m.Lock(ctx)
	defer lease.Unlock(ctx)

	st, _ := m.Status(ctx)
	fmt.Println(st.Held, st.Metadata, st.Fence == lease.Fence())
	// Output: true ci-runner-7 true
}

func ExampleWithStallTimeout() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	stuck, _ := locks.Mutex("import", dlock.WithTTL(time.Minute)).Lock(ctx)
	defer stuck.Unlock(ctx)

	// Wait as long as the lock changes hands, but give up once one holder
	// has kept it for 200ms while we waited.
	_, err := locks.Mutex("import", dlock.WithStallTimeout(200*time.Millisecond)).Lock(ctx)
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired))
	// Output: true
}

func ExampleRWMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	catalog := locks.RWMutex("catalog")

	// Readers share the lock; each has a lease of its own.
	reader, _ := catalog.RLock(ctx)
	err := catalog.RLocker().Do(ctx, func(ctx context.Context) error {
		st, _ := catalog.Status(ctx)
		fmt.Println("readers:", len(st.Readers))
		return nil
	})
	fmt.Println("err:", err)

	// A writer needs it to itself.
	_, err = catalog.TryLock(ctx)
	fmt.Println("writer beside a reader:", errors.Is(err, dlock.ErrNotAcquired))
	reader.Unlock(ctx)
	err = catalog.Do(ctx, func(ctx context.Context) error {
		fmt.Println("writing, alone")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// readers: 2
	// err: <nil>
	// writer beside a reader: true
	// writing, alone
	// err: <nil>
}

func ExampleMutexSet_Acquire() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	// A pool of two licences. Add is idempotent: every worker may call it
	// at start; a licence in use stays in use. Members stay in Redis until
	// removed.
	licences := locks.MutexSet("licences", dlock.WithTTL(30*time.Second))
	if err := licences.Add(ctx, "licence-1", "licence-2"); err != nil {
		fmt.Println(err)
		return
	}
	defer licences.Remove(ctx, "licence-1", "licence-2")

	// Acquire takes the least recently used free licence, waiting while
	// all are in use.
	lease, err := licences.Acquire(ctx)
	if err != nil {
		fmt.Println("no licence:", err)
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("using", lease.Name())
	// Output: using licence-1
}

func ExampleMutexSet_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	gpus := locks.MutexSet("gpus")
	gpus.Add(ctx, "gpu-0")
	defer gpus.Remove(ctx, "gpu-0")

	// Do holds a free member while the function runs; its context is
	// cancelled if the lease is lost.
	err := gpus.Do(ctx, func(ctx context.Context, gpu string) error {
		fmt.Println("training on", gpu)
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// training on gpu-0
	// err: <nil>
}

func ExampleSemaphore() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	// At most 4 GPU jobs at once across the fleet; a job takes as many
	// permits as it needs GPUs. Waiters are served in arrival order, and
	// a large job holds back those behind it, so it is never starved.
	gpus := locks.Semaphore("gpu-jobs", 4, dlock.WithMetadata("trainer-7"))
	err := gpus.Do(ctx, 3, func(ctx context.Context) error {
		st, _ := gpus.Status(ctx)
		fmt.Println("in use:", st.InUse, "of", st.Size)
		// ctx is cancelled if the lease is lost.
		return nil
	})
	fmt.Println("err:", err)

	// TryAcquire takes permits only if they are free and nobody waits.
	lease, err := gpus.TryAcquire(ctx, 1)
	if err != nil {
		fmt.Println("busy:", err)
		return
	}
	defer lease.Unlock(ctx)
	fmt.Println("fence:", lease.Fence() > 0)
	// Output:
	// in use: 3 of 4
	// err: <nil>
	// fence: true
}

func ExampleElection_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	// Every replica runs this loop body: one at a time leads and
	// compacts, the others wait in arrival order and take over when the
	// leader resigns, or within its TTL when it dies.
	compactor := locks.Election("compactor", dlock.WithMetadata("replica-3"))
	err := compactor.Do(ctx, "10.0.0.7:9000", func(ctx context.Context) error {
		leader, _ := compactor.Leader(ctx)
		fmt.Println("leading as", leader.Value)
		// ctx is cancelled, with cause ErrLost, if the leadership is lost.
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// leading as 10.0.0.7:9000
	// err: <nil>
}

func ExampleElection_Observe() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	// A follower watches who leads and where to reach it. Observe sends
	// the leader, then every change; it is woken by Redis, never polls.
	scheduler := locks.Election("scheduler")
	watch, stop := context.WithCancel(ctx)
	defer stop()
	leaders := scheduler.Observe(watch)

	// Meanwhile a replica becomes leader, announcing its address.
	lead, err := scheduler.Campaign(ctx, "10.0.0.7:9000")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("leader at", (<-leaders).Value)
	lead.Proclaim(ctx, "10.0.0.8:9000") // it moved, in the same term
	fmt.Println("leader at", (<-leaders).Value)
	lead.Resign(ctx)
	fmt.Println("nobody leads:", <-leaders == dlock.Leader{})
	// Output:
	// leader at 10.0.0.7:9000
	// leader at 10.0.0.8:9000
	// nobody leads: true
}

func ExampleFairMutex() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: exampleAddr})
	defer rdb.Close()
	locks := dlock.New(rdb)
	defer locks.Close()

	// Lock joins a queue kept in Redis: callers on every machine get the
	// lock in the order they asked for it, and a release wakes only the
	// next one in line.
	deploys := locks.FairMutex("deploy", dlock.WithMetadata("pipeline-42"))
	lease, err := deploys.Lock(ctx)
	if err != nil {
		fmt.Println("not locked:", err)
		return
	}
	defer lease.Unlock(ctx)

	st, _ := deploys.Status(ctx)
	fmt.Println("held by", st.Metadata+",", len(st.Waiters), "waiting")
	// Output: held by pipeline-42, 0 waiting
}

func ExampleNewRedlock() {
	ctx := context.Background()
	// Three Redis masters that share no data: the lock survives the loss
	// of any one of them.
	var masters []redis.UniversalClient
	for _, addr := range redlockAddrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		masters = append(masters, rdb)
	}
	locks := dlock.NewRedlock(masters)
	defer locks.Close()

	// The same Mutex API: Lock holds it on a majority of the masters.
	err := locks.Mutex("ledger-close", dlock.WithTTL(30*time.Second)).Do(ctx, func(ctx context.Context) error {
		fmt.Println("closing the ledger, alone")
		return nil
	})
	fmt.Println("err:", err)

	// The other primitives need one Redis deployment.
	_, err = locks.FairMutex("ledger-close").Lock(ctx)
	fmt.Println(errors.Is(err, dlock.ErrUnsupported))
	// Output:
	// closing the ledger, alone
	// err: <nil>
	// true
}
