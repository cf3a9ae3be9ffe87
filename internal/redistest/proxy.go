package redistest

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections on 127.0.0.1 to a Redis server, and can
// lose the reply to one chosen request after Redis has run it: the fault
// of a connection that breaks, or stalls, between a command and its
// answer. It is closed in t.Cleanup.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	fault  *fault
	conns  map[net.Conn]bool
	closed bool
	cut    bool // see Cut
	wg     sync.WaitGroup
}

// fault is an armed DropReply, DelayReply, DelayRequest or DropPushed.
type fault struct {
	marker  []byte
	pushed  bool          // marker is looked for in what Redis sends, not in requests
	request bool          // delay the request, not its reply
	delay   time.Duration // deliver the reply (or the request) this late instead of losing it
	hang    bool
	before  func()        // run once the reply arrived, before it is lost
	dropped chan struct{} // closed once the reply was lost
}

// StartProxy starts a proxy to the server at target.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients connect to.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DropReply arms the proxy: the next request that contains marker goes to
// Redis, and its reply is lost. Then, unless hang, the proxy closes that
// client connection (the client sees it break); with hang it keeps the
// connection open and silent, so the client waits for a reply that never
// comes. before, if not nil, runs once the reply has arrived from Redis,
// before it is lost. The returned channel is closed once it was.
func (p *Proxy) DropReply(marker string, hang bool, before func()) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = &fault{marker: []byte(marker), hang: hang, before: before, dropped: make(chan struct{})}
	return p.fault.dropped
}

// DelayReply arms the proxy: the reply to the next request that contains
// marker reaches the client d after Redis sent it. The returned channel
// is closed once it was delivered.
func (p *Proxy) DelayReply(marker string, d time.Duration) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = &fault{marker: []byte(marker), delay: d, dropped: make(chan struct{})}
	return p.fault.dropped
}

// DelayRequest arms the proxy: the next request that contains marker,
// and what follows it on its connection, reaches Redis d late, as on a
// connection that lost a segment and sent it again while the client's
// other connections flowed. The returned channel is closed once it was
// delivered.
func (p *Proxy) DelayRequest(marker string, d time.Duration) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = &fault{marker: []byte(marker), request: true, delay: d, dropped: make(chan struct{})}
	return p.fault.dropped
}

// DropPushed arms the proxy: the next data Redis sends that contains
// marker (a pub/sub message on a channel named so, say) is lost, and its
// connection closed, as when a connection breaks with a message in
// flight. The returned channel is closed once it was lost.
func (p *Proxy) DropPushed(marker string) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = &fault{marker: []byte(marker), pushed: true, dropped: make(chan struct{})}
	return p.fault.dropped
}

// Cut cuts the server off (on) or brings it back (off): while cut, the
// proxy has closed every connection it relayed and closes each new one at
// once, forwarding nothing, as a network partition that loses what was on
// its way.
func (p *Proxy) Cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = on
	if on {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

// Close stops accepting and closes every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// track registers c for Close and Cut; false when the proxy is closed or
// cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cut {
		return false
	}
	p.conns[c] = true
	return true
}

// take returns the armed fault if data (a request, or what Redis sent
// when pushed) matches it, disarming it.
func (p *Proxy) take(data []byte, pushed bool) *fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fault == nil || p.fault.pushed != pushed || !bytes.Contains(data, p.fault.marker) {
		return nil
	}
	f := p.fault
	p.fault = nil
	return f
}

// serve relays one client connection. Requests are small and one at a
// time (no pipelining), so each read of the client holds whole requests.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		_ = client.Close()
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	closeBoth := func() {
		_ = client.Close()
		_ = server.Close()
	}
	faults := make(chan *fault, 16)
	p.wg.Add(1)
	go func() { // client to server
		defer p.wg.Done()
		defer closeBoth()
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				f := p.take(buf[:n], false)
				if f != nil && f.request {
					time.Sleep(f.delay)
				} else if f != nil {
					faults <- f
				}
				_, werr := server.Write(buf[:n])
				if f != nil && f.request {
					close(f.dropped)
				}
				if werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// Server to client.
	defer closeBoth()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if f := p.take(buf[:n], true); f != nil {
				close(f.dropped)
				return
			}
			select {
			case f := <-faults:
				if f.delay > 0 {
					time.Sleep(f.delay)
					_, werr := client.Write(buf[:n])
					close(f.dropped)
					if werr != nil {
						return
					}
					continue
				}
				if f.before != nil {
					f.before()
				}
				close(f.dropped)
				if !f.hang {
					return
				}
				_, _ = io.Copy(io.Discard, server) // silent until closed
				return
			default:
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
