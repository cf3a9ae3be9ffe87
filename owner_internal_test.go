package dlock

import (
	"errors"
	"testing"
)

// TestParseAttemptHeldAgain: a try's reply in a table of one is a lease
// its token held already; a refusal or a bad fence so wrapped is a bad
// reply, never a lease.
func TestParseAttemptHeldAgain(t *testing.T) {
	for _, c := range []struct {
		name  string
		parse func(any, error) (attempt, error)
		reply any
		want  attempt
	}{
		{"taken", parseAttempt, "7", attempt{ok: true, fence: 7}},
		{"held again", parseAttempt, []any{"7"}, attempt{ok: true, fence: 7, again: true}},
		{"set taken", parseSetAttempt, "7 m", attempt{ok: true, fence: 7, member: "m"}},
		{"set held again", parseSetAttempt, []any{"7 m"}, attempt{ok: true, fence: 7, member: "m", again: true}},
	} {
		got, err := c.parse(c.reply, nil)
		if err != nil || got.ok != c.want.ok || got.fence != c.want.fence || got.member != c.want.member || got.again != c.want.again {
			t.Errorf("%s: %v gave %+v, %v; want %+v", c.name, c.reply, got, err, c.want)
		}
	}
	for _, reply := range []any{[]any{[]any{int64(0), int64(5), "3"}}, []any{"x"}, []any{"0"}} {
		if r, err := parseAttempt(reply, nil); !errors.Is(err, errBadReply) || r.ok {
			t.Errorf("%v gave %+v, %v; want errBadReply", reply, r, err)
		}
		if r, err := parseSetAttempt(reply, nil); !errors.Is(err, errBadReply) || r.ok {
			t.Errorf("set: %v gave %+v, %v; want errBadReply", reply, r, err)
		}
	}
}
