package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-dlock/dlock"
)

// connect opens the Redis client and a dlock client on it, once Redis
// answers; close both with the returned function.
func (e *env) connect(ctx context.Context) (*dlock.Client, func(), error) {
	if e.redlock && e.cluster {
		return nil, nil, usage("--redlock and --cluster exclude each other")
	}
	urls, from, err := e.redisURLs()
	if err != nil {
		return nil, nil, err
	}
	opts, err := e.redisOptions(urls)
	if err != nil {
		return nil, nil, err
	}
	e.verbosef("connecting to %s (from %s)", e.servers(urls), from)
	if e.redlock {
		return e.connectRedlock(ctx, opts)
	}
	rdb := e.redisClient(opts)
	e.rdbs = []redis.UniversalClient{rdb}
	if err := reach(ctx, e.rdbs); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	c := dlock.New(rdb, dlock.WithPrefix(e.prefix), dlock.WithLogger(e.libLog()))
	return c, func() { c.Close(); rdb.Close() }, nil
}

// servers names the Redis deployment of urls for -v, passwords hidden.
func (e *env) servers(urls []string) string {
	shown := make([]string, len(urls))
	for i, u := range urls {
		shown[i] = redact(u)
	}
	list := strings.Join(shown, ", ")
	switch {
	case e.redlock:
		return fmt.Sprintf("%d Redlock masters %s", len(urls), list)
	case e.cluster || len(urls) > 1:
		return "Redis Cluster " + list
	}
	return list
}

// reachTimeout bounds the first contact with Redis.
const reachTimeout = 5 * time.Second

// reach checks that a majority of rdbs (one: all) answer a PING within
// reachTimeout, so that a command does not wait for a lock on a Redis that
// is down, but exits 69 at once (77 when it refused the credentials). An
// ACL without PING is no reason to stop.
func reach(ctx context.Context, rdbs []redis.UniversalClient) error {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	errs := make([]error, len(rdbs))
	var wg sync.WaitGroup
	for i, rdb := range rdbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rdb.Ping(ctx).Err()
			switch {
			case refused(err) && !strings.HasPrefix(err.Error(), "NOPERM"):
				errs[i] = err // the credentials; an ACL without PING is no reason to stop
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
				// Connected, maybe, but not answered: paused, or frozen.
				errs[i] = fmt.Errorf("no answer within %v: %w", reachTimeout, err)
			case unreachable(err):
				errs[i] = err
			case isReply(err) && !strings.HasPrefix(err.Error(), "NOPERM"):
				// Redis refused the connection's setup (a database it does
				// not have: go-redis SELECTs it before the PING).
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	var down []error
	for _, err := range errs {
		if err != nil {
			down = append(down, err)
		}
	}
	if len(down) <= len(rdbs)-(len(rdbs)/2+1) {
		return nil
	}
	for _, err := range down {
		if refused(err) {
			return &ExitError{Code: ExitNoPerm, Err: fmt.Errorf("credentials refused by Redis: %w", err)}
		}
	}
	for _, err := range down {
		if isReply(err) && !unreachable(err) {
			return &ExitError{Code: ExitUsage, Err: fmt.Errorf("the server refused the connection (check the URL): %w", err)}
		}
	}
	return &ExitError{Code: ExitUnavailable, Err: fmt.Errorf("cannot reach Redis: %w", down[0])}
}

// isReply reports whether err is an error reply from Redis.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// connectRedlock opens one client per Redis server and a Redlock client
// on them.
func (e *env) connectRedlock(ctx context.Context, opts []*redis.Options) (*dlock.Client, func(), error) {
	seen := map[string]int{}
	for i, o := range opts {
		// One server counted twice would make a majority of fewer.
		server := o.Network + " " + o.Addr
		if j, dup := seen[server]; dup {
			return nil, nil, usage("--redlock: Redis %d of %d is Redis %d again (%s): one server would count twice", i+1, len(opts), j+1, o.Addr)
		}
		seen[server] = i
	}
	rdbs := make([]redis.UniversalClient, len(opts))
	for i, o := range opts {
		rdbs[i] = redis.NewClient(o)
	}
	e.rdbs = rdbs
	if err := reach(ctx, rdbs); err != nil {
		for _, r := range rdbs {
			r.Close()
		}
		return nil, nil, err
	}
	c := dlock.NewRedlock(rdbs, dlock.WithPrefix(e.prefix), dlock.WithLogger(e.libLog()))
	return c, func() {
		c.Close()
		for _, r := range rdbs {
			r.Close()
		}
	}, nil
}

// redisClient connects to the Redis servers of opts: one, or a cluster.
// clusterReload is how often the command's Cluster client reloads the slot
// map.
const clusterReload = 5 * time.Second

func (e *env) redisClient(opts []*redis.Options) redis.UniversalClient {
	first := opts[0]
	if len(opts) == 1 && !e.cluster {
		return redis.NewClient(first)
	}
	var addrs []string
	for _, o := range opts {
		addrs = append(addrs, o.Addr)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:     addrs,
		Username:  first.Username,
		Password:  first.Password,
		TLSConfig: first.TLSConfig,
		// go-redis' default, 60s, would leave a lone holder renewing on a
		// failed master that long (see README, Cluster).
		ClusterStateReloadInterval: clusterReload,
	})
}

// redisOptions parses the Redis URLs with go-redis' own parser and adds
// the TLS files.
func (e *env) redisOptions(urls []string) ([]*redis.Options, error) {
	tlsFiles, err := e.tlsConfig()
	if err != nil {
		return nil, err
	}
	var opts []*redis.Options
	for _, u := range urls {
		o, err := redis.ParseURL(u)
		switch {
		case err != nil && userinfo.MatchString(u):
			// The parser's message may quote any part of a password it
			// misread (a / in it ends the host: "invalid port").
			return nil, usage("bad Redis URL %q: it does not parse; in a user name or password, write / as %%2F, @ as %%40 and : as %%3A", redact(u))
		case err != nil:
			return nil, usage("bad Redis URL %q: %v", u, err)
		}
		if err := checkPool(u, o); err != nil {
			return nil, err
		}
		if tlsFiles != nil {
			if o.TLSConfig == nil {
				return nil, usage("--tls-ca, --tls-cert and --tls-key need a rediss:// URL, not %q", redact(u))
			}
			o.TLSConfig.RootCAs, o.TLSConfig.Certificates = tlsFiles.RootCAs, tlsFiles.Certificates
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// checkPool refuses the pool sizes in u's options o that go-redis would
// panic on: below 0 or past an int32.
func checkPool(u string, o *redis.Options) error {
	for _, f := range []struct {
		name string
		n    int
	}{{"pool_size", o.PoolSize}, {"min_idle_conns", o.MinIdleConns}, {"max_idle_conns", o.MaxIdleConns}, {"max_active_conns", o.MaxActiveConns}} {
		if f.n < 0 || f.n > math.MaxInt32 {
			return usage("bad Redis URL %q: %s=%d is out of range (0 to %d)", redact(u), f.name, f.n, math.MaxInt32)
		}
	}
	return nil
}

// redisURLs returns the URLs to connect to, and where they come from:
// --redis, else the lines of --redis-file, else $DLOCK_REDIS, else the
// lines of $DLOCK_REDIS_FILE, else DefaultRedis.
func (e *env) redisURLs() (urls []string, from string, err error) {
	list, file, from := e.redisURL, e.redisFile, "--redis"
	if list == "" && file == "" {
		list, file, from = os.Getenv("DLOCK_REDIS"), os.Getenv("DLOCK_REDIS_FILE"), "$DLOCK_REDIS"
		if list != "" {
			file = ""
		}
	}
	if list == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, "", usage("reading the Redis URL: %v", err)
		}
		list, from = strings.Join(strings.Fields(string(b)), ","), "file "+file
		if list == "" {
			return nil, "", usage("no Redis URL in %s", file)
		}
	}
	if list == "" {
		list, from = DefaultRedis, "the default"
	}
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return nil, "", usage("no Redis URL given")
	}
	return urls, from, nil
}

// tlsConfig loads --tls-ca, --tls-cert and --tls-key (or their
// environment variables); nil when none is given.
func (e *env) tlsConfig() (*tls.Config, error) {
	ca, cert, key := orEnv(e.tlsCA, "DLOCK_TLS_CA"), orEnv(e.tlsCert, "DLOCK_TLS_CERT"), orEnv(e.tlsKey, "DLOCK_TLS_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	cfg := &tls.Config{}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, usage("--tls-ca: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usage("--tls-ca: no PEM certificate in %s", ca)
		}
	}
	if (cert == "") != (key == "") {
		return nil, usage("--tls-cert and --tls-key go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, usage("--tls-cert/--tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

func orEnv(flag, name string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv(name)
}

// userinfo matches the user:password@ part of a URL that may not parse:
// up to its last @, since a password written unescaped may hold a / or
// an @.
var userinfo = regexp.MustCompile(`//.*@`)

// redact hides the password of a Redis URL, for messages.
func redact(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		return p.Redacted()
	}
	return userinfo.ReplaceAllString(u, "//xxxxx@")
}
