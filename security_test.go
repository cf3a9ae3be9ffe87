package dlock_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
	"github.com/go-dlock/dlock/internal/redistest"
)

// aclPassword replaces the README's placeholder password in tests.
const aclPassword = "s3cret-acl"

// ACLRules returns the README's rules for the dlock user, with the test
// password.
func ACLRules(t testing.TB) []any {
	t.Helper()
	return redistest.ACLRules(t, "README.md", aclPassword)
}

// aclClient makes the user of rules on srv and returns a dlock client
// that logs in as that user.
func aclClient(t *testing.T, srv *redistest.Server, rules []any) *dlock.Client {
	t.Helper()
	if err := srv.Client(t).Do(t.Context(), rules...).Err(); err != nil {
		t.Fatalf("%v: %v", rules, err)
	}
	rdb := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "dlock", aclPassword })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestACLRulesSuffice: the whole API works for a Redis user with exactly
// the README's rules, waiting (pub/sub) included.
func TestACLRulesSuffice(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := aclClient(t, srv, ACLRules(t))
	exerciseAPI(t, c)
}

// TestTLS: the whole API over redis-server's own TLS port, with
// certificates the test makes, through go-redis' TLSConfig.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv, files := redistest.StartTLS(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.TLSAddr(), TLSConfig: files.ClientConfig(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	exerciseAPI(t, c)

	// Without the CA, Lock fails at once: waiting does not make a
	// certificate trusted.
	untrusted := redis.NewClient(&redis.Options{Addr: srv.TLSAddr(), TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}})
	t.Cleanup(func() { _ = untrusted.Close() })
	uc := dlock.New(untrusted)
	t.Cleanup(func() { _ = uc.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := uc.Mutex("m").Lock(ctx); err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Lock with an untrusted server certificate: %v; want the certificate error at once", err)
	}
}

// exerciseAPI calls every public operation of c, each waiting form woken
// by a release, and fails the test on any error.
func exerciseAPI(t *testing.T, c *dlock.Client) {
	ctx := t.Context()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	rw := c.RWMutex("rw")
	lockers := []struct {
		name string
		l    dlock.Locker
	}{
		{"Mutex", c.Mutex("m")}, {"FairMutex", c.FairMutex("f")},
		{"RWMutex", rw}, {"RWMutex.RLocker", c.RWMutex("r").RLocker()},
		{"Semaphore", onePermit{c.Semaphore("sem", 1)}},
		{"Election", campaigner{c.Election("elect")}},
	}
	for _, lk := range lockers {
		waitWoken(t, lk.name, lk.l.TryLock, lk.l.Lock)
		must(lk.name+".Do", lk.l.Do(ctx, func(context.Context) error { return nil }))
	}
	// An election's leader proclaims, and an observer hears it.
	e := c.Election("elect")
	lead, err := e.TryCampaign(ctx, "first")
	must("TryCampaign", err)
	octx, stop := context.WithCancel(ctx)
	seen := e.Observe(octx)
	if ld := <-seen; ld.Value != "first" {
		t.Errorf("observed %+v, want the value \"first\"", ld)
	}
	must("Proclaim", lead.Proclaim(ctx, "second"))
	if ld := <-seen; ld.Value != "second" {
		t.Errorf("observed %+v, want the value \"second\"", ld)
	}
	stop()
	_, err = e.Leader(ctx)
	must("Leader", err)
	must("Resign", lead.Resign(ctx))
	// A writer waits for a reader, with its intention.
	waitWoken(t, "RWMutex read then write", rw.RLock, rw.Lock)
	for _, st := range []func(context.Context) (dlock.Status, error){
		c.Mutex("m").Status, c.FairMutex("f").Status, rw.Status, c.Semaphore("sem", 1).Status, c.Election("elect").Status,
	} {
		_, err := st(ctx)
		must("Status", err)
	}

	s := c.MutexSet("set")
	must("Add", s.Add(ctx, "a", "b"))
	held, err := s.TryAcquire(ctx)
	must("TryAcquire", err)
	waitWoken(t, "MutexSet.AcquireMember", func(ctx context.Context) (*dlock.Lease, error) {
		return s.TryAcquireMember(ctx, "b")
	}, func(ctx context.Context) (*dlock.Lease, error) { return s.AcquireMember(ctx, "b") })
	waitWoken(t, "MutexSet.Acquire", func(ctx context.Context) (*dlock.Lease, error) {
		return s.TryAcquireMember(ctx, "b")
	}, s.Acquire)
	_, err = s.Members(ctx)
	must("Members", err)
	_, err = s.Status(ctx)
	must("Set Status", err)
	_, err = s.ForceRelease(ctx, held.Name())
	must("ForceRelease", err)
	must("Remove", s.Remove(ctx, "a", "b"))

	l, err := c.Mutex("op").Lock(ctx)
	must("Lock", err)
	_, err = c.Inspect(ctx, "op")
	must("Inspect", err)
	_, err = c.List(ctx, "")
	must("List", err)
	_, err = c.ForceUnlock(ctx, "op")
	must("ForceUnlock", err)
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Unlock after ForceUnlock: %v, want ErrLost", err)
	}
}

// waitWoken takes a lease with take, starts wait in the background, and
// checks that releasing the lease lets wait through long before the TTL
// would (so a release woke it), then renews, checks and releases that.
func waitWoken(t *testing.T, name string, take, wait func(context.Context) (*dlock.Lease, error)) {
	t.Helper()
	ctx := t.Context()
	first, err := take(ctx)
	if err != nil {
		t.Fatalf("%s: first: %v", name, err)
	}
	got := make(chan error, 1)
	var second *dlock.Lease
	go func() {
		var err error
		second, err = wait(ctx)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it wait
	released := time.Now()
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("%s: Unlock: %v", name, err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("%s: waiting: %v", name, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the waiter was not woken by the release", name)
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("%s: waiter got the lock %v after the release", name, d)
	}
	if err := second.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("%s: Refresh: %v", name, err)
	}
	if ok, err := second.Held(ctx); !ok || err != nil {
		t.Fatalf("%s: Held: %v, %v", name, ok, err)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatalf("%s: Unlock: %v", name, err)
	}
}

// TestACLMissingRuleIsNamed: with one rule of the README missing, the
// error says what is wrong and where the rules are; a waiter that may not
// listen for releases says so rather than wait on timers.
func TestACLMissingRuleIsNamed(t *testing.T) {
	t.Parallel()
	for _, missing := range []string{"+evalsha", "+time", "~dlock:*", "&dlock:*", "+subscribe"} {
		t.Run(missing, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rules := slices.DeleteFunc(ACLRules(t), func(a any) bool { return a == missing })
			c := aclClient(t, srv, rules)
			// Held elsewhere, so that Lock must wait and listen.
			other, _, _ := newClient(t, srv)
			if _, err := other.Mutex("m", dlock.WithTTL(time.Minute)).TryLock(t.Context()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err := c.Mutex("m").Lock(ctx)
			if err == nil || !strings.Contains(err.Error(), "lacks a permission dlock needs") || ctx.Err() != nil {
				t.Fatalf("Lock without %s: %v; want the missing permission named, at once", missing, err)
			}
			t.Log(err)
		})
	}
}

// TestACLRefusalDoesNotStick: once the missing channel rule is granted,
// the same client listens again: a refusal is not remembered.
func TestACLRefusalDoesNotStick(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rules := slices.DeleteFunc(ACLRules(t), func(a any) bool { return a == "&dlock:*" })
	c := aclClient(t, srv, rules)
	other, _, _ := newClient(t, srv)
	if _, err := other.Mutex("m", dlock.WithTTL(time.Minute)).TryLock(t.Context()); err != nil {
		t.Fatal(err)
	}
	lock := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, err := c.Mutex("m").Lock(ctx)
		return err
	}
	if err := lock(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("Lock without the channel rule: %v, want NOPERM", err)
	}
	if err := srv.Client(t).Do(t.Context(), "ACL", "SETUSER", "dlock", "&dlock:*").Err(); err != nil {
		t.Fatal(err)
	}
	// Now it waits for the holder, as it should, until its ctx ends.
	if err := lock(); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock once the rule is granted: %v, want it to wait (ErrNotAcquired, DeadlineExceeded)", err)
	}
}

// TestACLRulesCoverScripts: every command a script runs is in the
// README's rules, so the rules cannot fall behind the scripts.
func TestACLRulesCoverScripts(t *testing.T) {
	rules := map[string]bool{}
	for _, a := range ACLRules(t) {
		rules[a.(string)] = true
	}
	files, err := filepath.Glob("lua/*.lua")
	libs, _ := filepath.Glob("lua/lib/*.lua")
	files = append(files, libs...)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	// redis.call, redis.pcall, and a local alias of either (call, pcall).
	call := regexp.MustCompile(`(?:redis\.)?p?call\('([A-Z]+)'`)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if !rules["+"+strings.ToLower(m[1])] {
				t.Errorf("%s runs %s, which the README's ACL rules do not allow", f, m[1])
			}
		}
	}
	// Release scripts publish with the command they are given.
	for _, c := range []string{"+publish", "+spublish"} {
		if !rules[c] {
			t.Errorf("the README's ACL rules lack %s", c)
		}
	}
}

// TestElectionUnderPartialACL: a user whose ACL lacks the election's
// channel cannot observe: the channel closes rather than wait for
// announcements that cannot come. One that may not PUBLISH still
// campaigns and resigns cleanly: the announcement is what fails, not the
// leadership.
func TestElectionUnderPartialACL(t *testing.T) {
	srv, ctx := serve(t)
	admin, _, _ := newClient(t, srv)
	without := func(rule string) []any {
		var rules []any
		for _, r := range ACLRules(t) {
			if r != rule {
				rules = append(rules, r)
			}
		}
		return rules
	}
	lead, err := admin.Election("acl").TryCampaign(ctx, "addr")
	if err != nil {
		t.Fatal(err)
	}
	deaf := aclClient(t, srv, without("&dlock:*"))
	closes(t, deaf.Election("acl").Observe(ctx), "for a user that may not listen")
	mustUnlock(t, lead.Lease)

	mute := aclClient(t, srv, without("+publish"))
	l, err := mute.Election("acl").TryCampaign(ctx, "mute")
	if err != nil {
		t.Fatalf("TryCampaign without +publish: %v", err)
	}
	if err := l.Proclaim(ctx, "still mute"); err != nil {
		t.Errorf("Proclaim without +publish: %v", err)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatalf("Resign without +publish: %v", err)
	}
	if ld, err := admin.Election("acl").Leader(ctx); !errors.Is(err, dlock.ErrNoLeader) {
		t.Errorf("Leader after the mute leader resigned: %+v, %v; want ErrNoLeader", ld, err)
	}
}

// TestObserveChannelRevoked: the channel rule is taken from Observe's
// user while nobody leads; Redis kills its subscription connection and
// refuses the resubscription (NOPERM). The observer's channel closes, as
// Observe promises when Redis refuses it; its follower slept for good,
// the refused channel dropped without waking the waiter on it (and, the
// rule back, never saw a leader again).
func TestObserveChannelRevoked(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	admin, _, _ := newClient(t, srv)
	c := aclClient(t, srv, ACLRules(t))
	e := admin.Election("rv", dlock.WithTTL(30*time.Second))
	seen := c.Election("rv").Observe(ctx)
	l, err := e.TryCampaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if ld := observed(t, seen); ld.Term != l.Fence() {
		t.Fatalf("observed %+v, want term %d", ld, l.Fence())
	}
	mustUnlock(t, l.Lease)
	if ld := observed(t, seen); ld.Term != 0 {
		t.Fatalf("observed %+v, want nobody", ld)
	}
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "dlock", "resetchannels").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case ld, ok := <-seen:
		if ok {
			t.Fatalf("observed %+v while the channel rule is gone", ld)
		}
	case <-time.After(5 * time.Second):
		t.Error("Observe's channel still open 5s after Redis refused its subscription (NOPERM)")
	}
}
