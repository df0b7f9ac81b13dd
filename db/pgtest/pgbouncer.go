package pgtest

import (
	"fmt"
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
	return fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s user=%s sslmode=disable", port, target.Database, target.User)
}

// freePort returns a TCP port on loopback that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}
