package dlock

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Errors returned by dlock wrap one of these where one
// applies; test for them with errors.Is.
var (
	// ErrNotAcquired reports that a lock was not acquired: TryLock found
	// it held, or Lock gave up, when its ctx ended (ctx.Err() then matches
	// too, whether the lock was held or Redis could not be reached) or its
	// stall timeout ran out.
	ErrNotAcquired = errors.New("dlock: not acquired")
	// ErrLost reports that a lease is no longer held: it expired, was
	// taken over, or was removed from Redis.
	ErrLost = errors.New("dlock: lease lost")
	// ErrUnsupported reports a primitive the client cannot offer, such as
	// a FairMutex on a Redlock client.
	ErrUnsupported = errors.New("dlock: not supported by this client")
	// ErrNoMember reports a MutexSet member that is not in the set.
	ErrNoMember = errors.New("dlock: no such member")
	// ErrInvalid reports a bad name, argument or option, a released lease,
	// or a call that must wait (Lock, RLock, Acquire, Campaign) on a
	// closed client or that was waiting when it closed.
	ErrInvalid = errors.New("dlock: invalid argument")
)

// aclHint is added to a Redis refusal for lack of permission.
const aclHint = "the Redis user lacks a permission dlock needs: grant it the rules in the README's \"Least privilege\" section"

// explain adds what to do to a Redis error that has an obvious remedy: an
// ACL refusal, which Redis words as NOPERM outside scripts, and inside
// them as "can't run this command" (7.0, without naming the command) or
// "ACL failure in script" (7.2 and later).
func explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if strings.Contains(msg, "NOPERM") || strings.Contains(msg, "user executing the script can't run") ||
		strings.Contains(msg, "ACL failure in script") {
		return fmt.Errorf("%w (%s)", err, aclHint)
	}
	return err
}
