package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-dlock/dlock/internal/redistest"
)

// TestRWShareEndedUnseenStaysGone: a read share kept in the readers' keys
// whose deadline passed, while more than a hundred shares that ran out
// before it are due (a call prunes a hundred at most), is neither
// extended by its renewal nor released by its Unlock as if it were live:
// both answer that the share is gone, as they do for a share that a
// prune dropped, or one kept in the owner key, which Redis expires.
func TestRWShareEndedUnseenStaysGone(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	rdb := srv.Client(t)
	c := New(rdb)
	t.Cleanup(func() { c.Close() })
	read := func(ttl time.Duration, tok string) {
		t.Helper()
		r, err := c.RWMutex("unseen", WithTTL(ttl)).reader().try(ctx, tok)
		if err != nil || !r.ok {
			t.Fatalf("read share of %s = (%+v, %v); want one", tok, r, err)
		}
	}
	read(time.Minute, "lone")   // the first reader is kept in the owner key
	read(time.Minute, "keeper") // the readers' keys live as their longest share
	// A hundred ahead of each call below.
	for i := range 200 {
		read(50*time.Millisecond, fmt.Sprintf("early%d", i))
	}
	read(100*time.Millisecond, "released")
	read(100*time.Millisecond, "renewed")
	time.Sleep(300 * time.Millisecond) // every share but two ran out
	side := readSide{c.RWMutex("unseen")}
	if ok, err := side.release(ctx, "released"); err != nil || ok {
		t.Errorf("release of a share that ran out = (%v, %v); want false", ok, err)
	}
	if ok, err := side.refresh(ctx, "renewed", time.Minute); err != nil || ok {
		t.Errorf("renewal of a share that ran out = (%v, %v); want false", ok, err)
	}
	rexp := c.RWMutex("unseen").keys.Part("rexp")
	for _, tok := range []string{"renewed", "released"} {
		if err := rdb.ZScore(ctx, rexp, tok).Err(); err == nil {
			t.Errorf("the share of %s that ran out is still kept", tok)
		}
	}
}
