package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// EachCommand is a go-redis hook that calls see with every command the
// client sends, alone or in a pipeline, before sending it.
type EachCommand func(ctx context.Context, cmd redis.Cmder)

func (see EachCommand) DialHook(next redis.DialHook) redis.DialHook { return next }

func (see EachCommand) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		see(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (see EachCommand) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			see(ctx, cmd)
		}
		return next(ctx, cmds)
	}
}
