// Package redistest starts real redis-server processes for tests: single
// nodes that can be killed, paused and restarted, and a six-node Redis
// Cluster. Every process is stopped in t.Cleanup.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	startTimeout  = 10 * time.Second // until a new process answers PING
	killTimeout   = 10 * time.Second // until a SIGKILLed process is reaped
	startAttempts = 5                // fresh ports tried when a port is taken
	outputTail    = 4 << 10          // bytes of server output kept for errors
)

// errExited reports that redis-server exited before it became ready,
// usually because another process took its port.
var errExited = errors.New("redis-server exited")

// Server is one redis-server process on a free 127.0.0.1 port, with no
// persistence.
type Server struct {
	bin     string
	dir     string
	conf    string   // a config file, first on the command line, if set
	args    []string // appended to the command line
	cluster bool
	tls     *TLSFiles // serve TLS too, on busPort (see StartTLS)
	wrap    []string  // a command redis-server runs under (see StartCounted)

	mu      sync.Mutex
	port    int
	busPort int // cluster bus port, kept across Restart like port
	cmd     *exec.Cmd
	done    chan struct{} // closed once cmd has been reaped
	paused  bool
}

// Start starts a redis-server and stops it in t.Cleanup. args are appended
// to the redis-server command line, e.g. "--maxmemory", "10mb".
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return startServers(t, 1, false, args)[0]
}

// StartN starts n independent redis-servers in parallel.
func StartN(t testing.TB, n int) []*Server {
	t.Helper()
	return startServers(t, n, false, nil)
}

// startServers starts n servers in parallel. Goroutines only return errors,
// so that t.Fatal is called from the test's goroutine.
func startServers(t testing.TB, n int, cluster bool, args []string) []*Server {
	t.Helper()
	bin := mustBinary(t, "DLOCK_REDIS_SERVER", "redis-server", "redis-server")
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = newServer(t, bin, args)
		servers[i].cluster = cluster
	}
	if err := startAll(servers); err != nil {
		t.Fatal(err)
	}
	return servers
}

// newServer returns a Server, not started yet, that is stopped in
// t.Cleanup and keeps its files in a fresh t.TempDir.
func newServer(t testing.TB, bin string, args []string) *Server {
	s := &Server{bin: bin, dir: t.TempDir(), args: args}
	// Registered after t.TempDir, so it runs before the dir is removed.
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	})
	return s
}

// startAll starts servers in parallel on fresh ports. Goroutines only
// return errors, so that t.Fatal is called from the test's goroutine.
func startAll(servers []*Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.startFresh()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// mustBinary finds a program, overridable by the env variable; a missing
// program fails the test, because skipping would hide untested code. pkg
// is the Debian package that installs it, for the message.
func mustBinary(t testing.TB, env, name, pkg string) string {
	t.Helper()
	path, err := binary(env, name, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func binary(env, name, pkg string) (string, error) {
	prog := name
	if v := os.Getenv(env); v != "" {
		prog = v
	}
	path, err := exec.LookPath(prog)
	if err != nil {
		return "", fmt.Errorf("%s not found in PATH: install it with "+
			"`apt-get install -y %s` (Debian/Ubuntu), or run ./scripts/test, which does "+
			"(or set $%s to its path; %v)", name, pkg, env, err)
	}
	return path, nil
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the TCP port, which stays the same across Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Client returns a new go-redis client to s, closed in t.Cleanup.
func (s *Server) Client(t testing.TB, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	for _, opt := range opts {
		opt(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill sends SIGKILL and waits for the process to exit. Killing a server
// that is not running does nothing.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
}

// Pause freezes the server with SIGSTOP: connections are still accepted by
// the kernel but nothing is answered, like a stalled host.
func (s *Server) Pause(t testing.TB) { t.Helper(); s.signal(t, syscall.SIGSTOP) }

// Resume undoes Pause with SIGCONT.
func (s *Server) Resume(t testing.TB) { t.Helper(); s.signal(t, syscall.SIGCONT) }

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		t.Fatalf("redistest: %v to %s: server is not running", sig, s.addrLocked())
	}
	// The process group also holds any child redis forked (e.g. for a
	// replication snapshot).
	if err := syscall.Kill(-s.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("redistest: %v to %s: %v", sig, s.addrLocked(), err)
	}
	s.paused = sig == syscall.SIGSTOP
}

// Restart kills the server if it is running and starts a new process on the
// same port and dir, so a cluster node rejoins with its nodes.conf. As
// nothing is persisted, the new process has no keys (unless the test saved
// them). It returns once the server answers PING, or LOADING while it
// loads saved keys.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.restart(t, false)
}

// RestartEmpty is Restart after deleting the server's saved data (RDB and
// AOF files): a restart that forgets every key even when the server
// persists them.
func (s *Server) RestartEmpty(t testing.TB) {
	t.Helper()
	s.restart(t, true)
}

func (s *Server) restart(t testing.TB, forget bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.killLocked()
	if err == nil && forget {
		err = os.RemoveAll(filepath.Join(s.dir, "appendonlydir"))
		if rerr := os.Remove(filepath.Join(s.dir, "dump.rdb")); !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	if err == nil {
		err = s.spawnLocked()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// Stop kills the server if it is running. It is idempotent and called
// automatically in t.Cleanup.
func (s *Server) Stop() { _ = s.stop() }

func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

// alive reports whether the server is running and not paused, i.e. whether
// it can be expected to answer.
func (s *Server) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runningLocked() && !s.paused
}

func (s *Server) runningLocked() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *Server) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// startFresh starts the server on newly chosen free ports. Between closing
// the probe listener and redis binding, another process may take the port;
// redis then exits and we try other ports.
func (s *Server) startFresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for range startAttempts {
		ports, perr := freePorts(2) // the second one is used by cluster nodes
		if perr != nil {
			return perr
		}
		s.port, s.busPort = ports[0], ports[1]
		if err = s.spawnLocked(); !errors.Is(err, errExited) {
			return err
		}
	}
	return err
}

// freePorts asks the kernel for n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("redistest: finding a free port: %w", err)
		}
		// Kept open until all are chosen, so the ports are distinct.
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// spawnLocked starts redis-server on s.port and waits until it answers.
func (s *Server) spawnLocked() error {
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--protected-mode", "no", "--daemonize", "no",
	)
	if s.cluster {
		args = append(args,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			// Failover takes about node timeout + 1s; 2s keeps tests fast
			// without failing over on scheduling hiccups under -race.
			"--cluster-node-timeout", "2000",
			// The default bus port, port+10000, may be taken or above 65535.
			"--cluster-port", strconv.Itoa(s.busPort),
			// Let a replica take over however long its master was gone.
			"--cluster-replica-validity-factor", "0")
	}
	args = append(args, s.tlsArgs()...)
	args = append(args, s.args...)

	out := &tail{}
	name := s.bin
	if len(s.wrap) > 0 {
		name, args = s.wrap[0], append(append(s.wrap[1:len(s.wrap):len(s.wrap)], s.bin), args...)
	}
	cmd := exec.Command(name, args...)
	// exec drains the output through a pipe into out, so redis never
	// blocks on writing its log.
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	// A forked child still holding the pipe must not make Wait hang.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: starting %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done, s.paused = cmd, done, false

	if err := waitReady(s.addrLocked(), cmd.Process.Pid, done); err != nil {
		_ = s.killLocked()
		return fmt.Errorf("redistest: redis-server on %s: %w\n--- last output ---\n%s",
			s.addrLocked(), err, out)
	}
	return nil
}

// killLocked SIGKILLs the process group, which works on a stopped process
// too, and waits until the process has been reaped, so no zombie remains.
func (s *Server) killLocked() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.done:
	default:
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-s.done:
	case <-time.After(killTimeout):
		return fmt.Errorf("redistest: redis-server on %s (pid %d) still running %v after SIGKILL",
			s.addrLocked(), s.cmd.Process.Pid, killTimeout)
	}
	s.cmd, s.paused = nil, false
	return nil
}

// waitReady polls addr until the redis-server with the given pid answers
// PING. The pid check matters: if our server failed to bind because another
// redis already listens there, that other server would answer PING too.
func waitReady(addr string, pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	want := fmt.Sprintf("process_id:%d\r\n", pid)
	var err error
	for time.Now().Before(deadline) {
		var info string
		if info, err = pingInfo(addr); err == nil {
			if strings.Contains(info, want) {
				return nil
			}
			err = errors.New("another process answers on this port")
		}
		select {
		case <-exited:
			return errExited
		case <-time.After(10 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %v: %w", startTimeout, err)
}

// pingInfo sends PING and INFO server over a raw connection, avoiding the
// retries and connection pool of a client.
func pingInfo(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "PING\r\nINFO server\r\n"); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	// A server still loading its data answers LOADING: it is up.
	if line, err := r.ReadString('\n'); err != nil {
		return "", err
	} else if line != "+PONG\r\n" && !strings.HasPrefix(line, "-LOADING") {
		return "", fmt.Errorf("PING: %q", strings.TrimSpace(line))
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if err != nil || !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("INFO: %q", strings.TrimSpace(line))
	}
	body := make([]byte, n)
	_, err = io.ReadFull(r, body)
	return string(body), err
}

// adminClient returns a client that fails fast, for polling possibly dead
// or paused nodes.
func adminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second,
		WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
	})
}

// tail is an io.Writer that keeps only the last outputTail bytes.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > outputTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-outputTail:]...)
	}
	return len(p), nil
}

// String returns the kept output, without a leading partial line.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.buf)
	if len(t.buf) == outputTail {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return s
}

// StartMain starts a server that belongs to no single test, for TestMain
// and Example functions. The caller must Stop it. A missing redis-server is
// an error that says how to install it.
func StartMain() (*Server, error) {
	bin, err := binary("DLOCK_REDIS_SERVER", "redis-server", "redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir}
	if err := s.startFresh(); err != nil {
		return nil, err
	}
	return s, nil
}

// addrsOf returns the servers' addresses.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}
