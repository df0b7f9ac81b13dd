package pgtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"erp/db/localpg"
)

// PgBouncer starts a PgBouncer in transaction-pooling mode in front of the
// database url names (a URL NewDB returned) and returns the URL of the same
// database through it, over TCP on loopback. It is stopped at t's cleanup,
// before the database is dropped. As root it runs as the OS user postgres
// (PgBouncer refuses root). Without the pgbouncer binary (Debian:
// apt-get install pgbouncer) the test fails when CI=true and is skipped
// otherwise.
func PgBouncer(t testing.TB, url string) string {
	t.Helper()
	u, _ := startPgBouncer(t, url, false)
	return u
}

// PgBouncerTLS is PgBouncer requiring TLS from its clients, with a
// certificate for localhost and 127.0.0.1 from a CA of its own. It
// returns the URL (sslmode=verify-full, host localhost) and the CA's PEM
// file, which the URL names as sslrootcert.
func PgBouncerTLS(t testing.TB, url string) (tlsURL, caFile string) {
	t.Helper()
	return startPgBouncer(t, url, true)
}

func startPgBouncer(t testing.TB, url string, withTLS bool) (bouncerURL, caFile string) {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, statErr := os.Stat(bin); statErr != nil {
			msg := "pgbouncer is not installed (Debian: apt-get install pgbouncer; .ci/run does it)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	target, err := pgconn.ParseConfig(url)
	require.NoError(t, err)
	cred, err := localpg.ServerCredential(t.Context())
	require.NoError(t, err)

	dir, err := os.MkdirTemp("", "erp-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	if cred != nil {
		require.NoError(t, os.Chown(dir, int(cred.Uid), int(cred.Gid)))
	}
	port := freePort(t)
	server := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", target.Host, target.Port, target.Database, target.User)
	if target.Password != "" {
		server += " password=" + target.Password
	}
	ini := strings.Join([]string{
		"[databases]",
		target.Database + " = " + server,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(dir, "userlist.txt"),
		"pool_mode = transaction",
		"max_client_conn = 500",
		"default_pool_size = 20",
		"logfile = " + filepath.Join(dir, "pgbouncer.log"),
		"pidfile = " + filepath.Join(dir, "pgbouncer.pid"),
		"",
	}, "\n")
	clientTLS := "sslmode=disable"
	if withTLS {
		caFile = writeTestCerts(t, dir, cred)
		ini += strings.Join([]string{
			"client_tls_sslmode = require",
			"client_tls_cert_file = " + filepath.Join(dir, "server.pem"),
			"client_tls_key_file = " + filepath.Join(dir, "server.key"),
			"",
		}, "\n")
		clientTLS = "sslmode=verify-full sslrootcert=" + caFile
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(strconv.Quote(target.User)+` ""`+"\n"), 0o644))

	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	out, err := os.Create(filepath.Join(dir, "stderr"))
	require.NoError(t, err)
	defer func() { _ = out.Close() }()
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start(), "start pgbouncer")
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT) // PgBouncer's safe shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			break
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
			t.Fatalf("pgbouncer exited: %s%s", stderr, log)
		default:
		}
		require.True(t, time.Now().Before(deadline), "pgbouncer did not listen on %s", addr)
		time.Sleep(20 * time.Millisecond)
	}
	host := "127.0.0.1"
	if withTLS {
		host = "localhost" // the name verify-full checks against the certificate
	}
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s %s", host, port, target.Database, target.User, clientTLS), caFile
}

// freePort returns a TCP port on loopback that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// writeTestCerts writes ca.pem, server.pem and server.key (for localhost
// and 127.0.0.1, valid for a day) into dir, readable by cred's user, and
// returns ca.pem's path.
func writeTestCerts(t testing.TB, dir string, cred *syscall.Credential) string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "erp test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	write := func(name, typ string, b []byte, mode os.FileMode) {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), mode))
		if cred != nil {
			require.NoError(t, os.Chown(path, int(cred.Uid), int(cred.Gid)))
		}
	}
	write("ca.pem", "CERTIFICATE", caDER, 0o644)
	write("server.pem", "CERTIFICATE", der, 0o644)
	write("server.key", "PRIVATE KEY", keyDER, 0o600)
	return filepath.Join(dir, "ca.pem")
}
