package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a test certificate authority, a server
// certificate it signed for 127.0.0.1, and a client certificate.
type TLSFiles struct {
	CA         string // the CA's certificate
	ServerCert string
	ServerKey  string
	ClientCert string
	ClientKey  string
}

// ClientConfig returns a TLS configuration that trusts the CA and shows
// the client certificate.
func (f *TLSFiles) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// StartTLS starts a redis-server that also serves TLS on a port of its
// own (TLSAddr), with certificates made for the test, and asks clients
// for a certificate signed by the same CA, as redis-server does by
// default. The plain port stays open for the harness.
func StartTLS(t testing.TB, args ...string) (*Server, *TLSFiles) {
	t.Helper()
	files, err := makeCerts(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: making TLS certificates: %v", err)
	}
	bin := mustBinary(t, "DLOCK_REDIS_SERVER", "redis-server", "redis-server")
	s := newServer(t, bin, args)
	s.tls = files
	if err := startAll([]*Server{s}); err != nil {
		t.Fatal(err)
	}
	return s, files
}

// TLSAddr returns the host:port of the TLS listener of a StartTLS server.
func (s *Server) TLSAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.busPort))
}

// tlsArgs are the redis-server arguments of a TLS server; none otherwise.
func (s *Server) tlsArgs() []string {
	if s.tls == nil {
		return nil
	}
	return []string{"--tls-port", strconv.Itoa(s.busPort),
		"--tls-cert-file", s.tls.ServerCert, "--tls-key-file", s.tls.ServerKey,
		"--tls-ca-cert-file", s.tls.CA}
}

// makeCerts writes a CA and the server and client certificates it signs
// into dir.
func makeCerts(dir string) (*TLSFiles, error) {
	f := &TLSFiles{
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	for i, leaf := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
	}{{f.ServerCert, f.ServerKey, x509.ExtKeyUsageServerAuth}, {f.ClientCert, f.ClientKey, x509.ExtKeyUsageClientAuth}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "127.0.0.1"},
			NotBefore: ca.NotBefore, NotAfter: ca.NotAfter,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{leaf.usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := writePEM(leaf.cert, "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := writePEM(leaf.key, "EC PRIVATE KEY", keyDER); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}
