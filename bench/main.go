package main

import (
	_ "github.com/bsm/redislock"
	_ "github.com/go-dlock/dlock"
	_ "github.com/go-redsync/redsync/v4"
	_ "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	_ "github.com/redis/go-redis/v9"
)

func main() {}
