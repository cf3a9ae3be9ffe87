package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// poolSize is the go-redis PoolSize of every client the benchmark makes,
// for every library alike.
const poolSize = 64

// server is a redis-server this program started on a free loopback port,
// without persistence.
type server struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

func startServer(bin string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "dlock-bench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--dir", dir, "--maxclients", "20000")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s (install it with apt-get install redis-server): %w", bin, err)
	}
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, dir: dir}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := rdb.Ping(context.Background()).Err()
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer: %w", s.addr, err)
		}
	}
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	os.RemoveAll(s.dir)
}

// counter is a go-redis hook that counts the commands a client sends: one
// per command, pipelined or not. Connection handshakes are not counted.
// Redis' own INFO commandstats would also count the commands that scripts
// run, so the client side is where round trips are counted.
type counter struct {
	n     atomic.Int64
	names sync.Map // every command name sent
}

func (c *counter) add(cmd redis.Cmder) {
	if !handshake[cmd.Name()] {
		c.n.Add(1)
		c.names.Store(cmd.Name(), true)
	}
}

// sent reports whether the client sent a command called name.
func (c *counter) sent(name string) bool {
	_, ok := c.names.Load(name)
	return ok
}

var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

// newClient returns a go-redis client on addr whose commands cnt counts.
func newClient(addr string, cnt *counter) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	if cnt != nil {
		rdb.AddHook(cnt)
	}
	return rdb
}

// serverVersion returns INFO server's redis_version.
func serverVersion(ctx context.Context, admin *redis.Client) string {
	info, err := admin.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}

// pingRTT measures n PING round trips on rdb and returns their latencies.
func pingRTT(ctx context.Context, rdb *redis.Client, n int) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		d = append(d, time.Since(t))
	}
	return d, nil
}

// commandUsec is the time Redis has spent running the commands that cnt's
// client sends, in µs (INFO commandstats). Only those: commands run inside
// scripts are listed too, and their time is already the script's.
func commandUsec(ctx context.Context, admin *redis.Client, cnt *counter) float64 {
	info, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		name, cmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !cmd || !cnt.sent(name) {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseFloat(v, 64)
				total += n
			}
		}
	}
	return total
}
