// Package localpg runs a private PostgreSQL cluster from the server binaries
// installed on the machine (initdb, pg_ctl, postgres), for development and
// tests. The cluster listens on no TCP port: it accepts connections only on a
// unix socket in a directory only its owner can enter, so trust
// authentication is safe.
package localpg

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// superuser is the cluster's superuser role and, when we run as root, the
	// OS user the server runs as.
	superuser = "postgres"
	// port only names the socket file (.s.PGSQL.5432): nothing listens on TCP,
	// so clusters in different directories never collide.
	port = 5432
	// maxSocketPath is the longest unix socket path PostgreSQL accepts: the
	// kernel's sun_path holds 108 bytes including the terminating NUL.
	maxSocketPath = 107
	// logTailLines is how much of postgres.log a start error carries.
	logTailLines = 20
)

// errNoBinaries is returned by FindBinaries; its text tells the reader how to
// get the binaries, so callers print it as is.
var errNoBinaries = errors.New("no PostgreSQL server binaries (initdb, pg_ctl) found in PATH or /usr/lib/postgresql/*/bin: install the distro's postgresql package (apt-get install postgresql) or set DATABASE_URL")

// Config for Start.
type Config struct {
	// Dir is the cluster (data) directory, e.g. ".data/pg". It is made
	// absolute, created if missing and initialised by initdb when it holds no
	// PG_VERSION. It also holds the server log, postgres.log, and usually the
	// socket directory, run/.
	Dir string
	// DBName is the database Start creates if missing, e.g. "erp". Empty means
	// the "postgres" database, which always exists.
	DBName string
	// NoSync turns fsync, synchronous_commit and full_page_writes off (and
	// makes initdb skip its final sync): much faster, but a machine crash can
	// corrupt the cluster. For throwaway test clusters only.
	NoSync bool
	// Logger receives start and stop events; nil discards them.
	Logger *slog.Logger
}

// Cluster is a running PostgreSQL started by Start. Its methods are safe for
// concurrent use.
type Cluster struct {
	bin       string // directory holding initdb, pg_ctl and postgres
	dir       string // absolute data directory
	socketDir string
	tmpSocket bool // socketDir is a short directory under the temp dir
	dbName    string
	noSync    bool
	cred      *syscall.Credential // nil unless we run as root
	logger    *slog.Logger

	// owner is the open, flock-ed <dir>.lock: while a Cluster holds it, no
	// other Start uses dir. The kernel releases it when the process dies,
	// however it dies, so a server found running without it was left by a
	// process that crashed.
	owner *os.File

	mu      sync.Mutex
	stopped bool
}

// Start starts the cluster in cfg.Dir and returns once it accepts
// connections and cfg.DBName exists. On first use it runs initdb (superuser
// "postgres", UTF8, locale C.UTF-8, trust authentication). As root it runs
// the server as the OS user "postgres", creating that user if missing. A
// start failure's error carries the tail of Dir/postgres.log. Start fails if
// the binaries are missing (see FindBinaries) or another Cluster (in this
// or another process) uses Dir: the lock file Dir + ".lock" says so. A
// server left running in Dir by a process that crashed is stopped first.
// On a 2-CPU machine a cold start (initdb) takes about 2 s, a warm one
// about 150 ms (see the benchmarks).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	begin := time.Now()
	if cfg.Dir == "" {
		return nil, errors.New("start postgres: empty Config.Dir")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("start postgres in %s: %w", cfg.Dir, err)
	}
	if strings.ContainsAny(dir, "\"$`\\\n") {
		// pg_ctl pastes the path between double quotes into a shell command.
		return nil, fmt.Errorf("start postgres in %q: the path contains a character pg_ctl cannot quote (\", $, `, \\, newline)", dir)
	}
	bin, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, dir: dir, dbName: cfg.DBName, noSync: cfg.NoSync, logger: cfg.Logger}
	if c.dbName == "" {
		c.dbName = superuser
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.cred, err = ServerCredential(ctx); err != nil {
		return nil, err
	}
	c.socketDir, c.tmpSocket = socketDirFor(dir)

	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("create parent of %s: %w", dir, err)
	}
	if c.cred != nil {
		if err := ensureSearchable(filepath.Dir(dir), int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	if c.owner, err = lockOwner(dir); err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			c.releaseOwner()
		}
	}()
	initialised := false
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); errors.Is(err, fs.ErrNotExist) {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
		initialised = true
	} else if err != nil {
		return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
	}
	if err := c.prepare(); err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		if ctx.Err() != nil {
			// pg_ctl was killed, but the postmaster it forked may come up
			// anyway; it would block the next Start.
			_ = c.Stop(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		// Leave no orphan server behind a failed Start.
		return nil, errors.Join(err, c.Stop(context.WithoutCancel(ctx)))
	}
	started = true
	c.logger.InfoContext(ctx, "postgres started",
		slog.String("dir", dir), slog.String("socket_dir", c.socketDir),
		slog.String("database", c.dbName), slog.Bool("initdb", initialised),
		slog.Duration("elapsed", time.Since(begin)))
	return c, nil
}

// URL returns a libpq key=value connection string for Config.DBName (over
// the unix socket, as superuser "postgres") that pgx accepts.
func (c *Cluster) URL() string { return c.connString(c.dbName) }

// AdminURL returns the connection string of URL for the "postgres" database,
// from which tests create and drop databases.
func (c *Cluster) AdminURL() string { return c.connString(superuser) }

func (c *Cluster) connString(db string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable",
		quoteValue(c.socketDir), port, superuser, quoteValue(db))
}

// quoteValue quotes a value for a key=value connection string.
func quoteValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// Stop shuts the server down in fast mode (open sessions are rolled back)
// and waits until it has exited, up to 60 s. Cancelling ctx abandons the
// wait, so on shutdown pass a context that is not already cancelled
// (context.WithoutCancel). Calling it again, or after the server died on its
// own, returns nil.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	begin := time.Now()
	if out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dir, "-m", "fast", "-w", "-t", "60"); err != nil {
		if c.running(ctx) {
			return fmt.Errorf("stop postgres in %s: %w: %s", c.dir, err, bytes.TrimSpace(out))
		}
		c.logger.WarnContext(ctx, "postgres was not running", slog.String("dir", c.dir))
	}
	c.stopped = true
	c.releaseOwner()
	if c.tmpSocket {
		// Empty once the server has gone; a failure only leaves an empty
		// directory that the next Start reuses.
		_ = os.Remove(c.socketDir)
	}
	c.logger.InfoContext(ctx, "postgres stopped", slog.String("dir", c.dir), slog.Duration("elapsed", time.Since(begin)))
	return nil
}

// running reports whether pg_ctl sees a live server in the data directory.
func (c *Cluster) running(ctx context.Context) bool {
	_, err := c.run(ctx, "pg_ctl", "status", "-D", c.dir)
	var exitErr *exec.ExitError
	// Exit status 3 means "no server running", 4 "no data directory".
	return !errors.As(err, &exitErr) || (exitErr.ExitCode() != 3 && exitErr.ExitCode() != 4)
}

// FindBinaries returns the directory holding initdb, pg_ctl and postgres:
// the first directory of $PATH that has initdb (symlinks resolved, so a
// /usr/local/bin link leads to the real directory), else the newest
// /usr/lib/postgresql/<version>/bin. Its error tells how to install them.
func FindBinaries() (dir string, err error) {
	return findBinaries(os.Getenv("PATH"), "/usr/lib/postgresql/*/bin")
}

func findBinaries(pathList, pattern string) (string, error) {
	for _, d := range filepath.SplitList(pathList) {
		if d == "" || !filepath.IsAbs(d) {
			continue // a relative PATH entry depends on the working directory
		}
		initdb := filepath.Join(d, "initdb")
		if !isExecutable(initdb) {
			continue
		}
		if real, err := filepath.EvalSymlinks(initdb); err == nil && hasBinaries(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if hasBinaries(d) {
			return d, nil
		}
	}
	dirs, err := filepath.Glob(pattern)
	if err != nil {
		return "", fmt.Errorf("find postgres binaries in %s: %w", pattern, err)
	}
	// Newest major version first: compare "9.6" < "15" < "16" numerically.
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, d := range dirs {
		if hasBinaries(d) {
			return d, nil
		}
	}
	return "", errNoBinaries
}

func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if !isExecutable(filepath.Join(dir, name)) {
			return false
		}
	}
	return true
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}

// ServerCredential returns nil when we are not root. As root it returns the
// credential of the OS user "postgres", creating the user if missing,
// because initdb and postgres refuse to run as root.
func ServerCredential(ctx context.Context) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(superuser)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		out, addErr := exec.CommandContext(ctx, "useradd", "--system", "--no-create-home", superuser).CombinedOutput()
		if addErr != nil {
			return nil, fmt.Errorf("create OS user %s to run postgres as (it refuses to run as root): %w: %s", superuser, addErr, bytes.TrimSpace(out))
		}
		u, err = user.Lookup(superuser)
	}
	if err != nil {
		return nil, fmt.Errorf("look up OS user %s: %w", superuser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid %q of OS user %s: %w", u.Uid, superuser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid %q of OS user %s: %w", u.Gid, superuser, err)
	}
	// Groups stays empty so that the children drop root's supplementary groups.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// socketDirFor returns the socket directory for data directory dir, and
// whether it is a short one under the temp dir.
func socketDirFor(dir string) (string, bool) {
	sock := filepath.Join(dir, "run")
	if len(sock)+len("/.s.PGSQL.5432") <= maxSocketPath {
		return sock, false
	}
	// A unix socket path is limited to 107 bytes, so a deep Dir gets its
	// socket directory in the temp dir instead, named after a hash of Dir so
	// that every start of the same cluster finds the same socket.
	sum := sha256.Sum256([]byte(dir))
	base := os.TempDir()
	if len(base) > 64 {
		base = "/tmp"
	}
	return filepath.Join(base, "erp-pg-"+hex.EncodeToString(sum[:8])), true
}

// ensureSearchable makes sure the OS user uid (group gid) can traverse every
// directory from dir up to /. The only permission it changes is adding o+x
// to directories below the temp dir (os.MkdirTemp makes them 0700); any
// other unsearchable directory is an error naming it.
func ensureSearchable(dir string, uid, gid int) error {
	tmp := filepath.Clean(os.TempDir())
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("check access to %s: %w", p, err)
		}
		mode := info.Mode().Perm()
		searchable := mode&0o001 != 0
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			searchable = searchable || (int(st.Uid) == uid && mode&0o100 != 0) || (int(st.Gid) == gid && mode&0o010 != 0)
		}
		if !searchable {
			rel, err := filepath.Rel(tmp, p)
			if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
				return fmt.Errorf("directory %s is not searchable by OS user %s that runs postgres: run chmod o+x %s or choose a Dir elsewhere", p, superuser, p)
			}
			if err := os.Chmod(p, mode|0o001); err != nil {
				return fmt.Errorf("let OS user %s search %s: %w", superuser, p, err)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// initdb creates the cluster. When Dir does not exist yet it initialises a
// sibling directory and renames it into place, so that an interrupted initdb
// never leaves a half-made cluster that later starts would trip over.
func (c *Cluster) initdb(ctx context.Context) error {
	begin := time.Now()
	target := c.dir
	entries, err := os.ReadDir(c.dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		target, err = os.MkdirTemp(filepath.Dir(c.dir), "."+filepath.Base(c.dir)+".initdb-")
		if err != nil {
			return fmt.Errorf("initdb in %s: %w", c.dir, err)
		}
		defer os.RemoveAll(target) // a no-op after the rename
	case err != nil:
		return fmt.Errorf("initdb in %s: %w", c.dir, err)
	case len(entries) > 0:
		return fmt.Errorf("initdb in %s: directory is not empty and holds no PG_VERSION: remove it or choose another Dir", c.dir)
	}
	if err := c.chown(target); err != nil {
		return err
	}
	args := []string{"-D", target, "-U", superuser, "--auth=trust", "--encoding=UTF8"}
	if c.noSync {
		args = append(args, "--no-sync")
	}
	out, err := c.run(ctx, "initdb", append(args, "--locale=C.UTF-8")...)
	if err != nil && bytes.Contains(out, []byte("locale")) {
		// No C.UTF-8 on this machine: the C locale with UTF8 encoding sorts
		// the same way (by code point). initdb emptied target on failure.
		c.logger.WarnContext(ctx, "initdb: no C.UTF-8 locale, using --no-locale", slog.String("dir", c.dir))
		out, err = c.run(ctx, "initdb", append(args, "--no-locale")...)
	}
	if err != nil {
		return fmt.Errorf("initdb in %s: %w: %s", c.dir, err, bytes.TrimSpace(out))
	}
	if target != c.dir {
		if err := os.Rename(target, c.dir); err != nil {
			return fmt.Errorf("initdb in %s: %w", c.dir, err)
		}
	}
	c.logger.InfoContext(ctx, "initdb done", slog.String("dir", c.dir), slog.Duration("elapsed", time.Since(begin)))
	return nil
}

// prepare creates the socket directory and, as root, hands the data
// directory to the server's OS user.
func (c *Cluster) prepare() error {
	uid := os.Geteuid()
	if c.cred != nil {
		uid = int(c.cred.Uid)
	}
	if c.tmpSocket {
		// The temp dir is shared with other users: refuse a directory (or
		// symlink) someone else planted where our socket would go.
		if err := os.Mkdir(c.socketDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create socket directory %s: %w", c.socketDir, err)
		}
		info, err := os.Lstat(c.socketDir)
		if err != nil {
			return fmt.Errorf("create socket directory %s: %w", c.socketDir, err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !info.IsDir() || !ok || (int(st.Uid) != uid && int(st.Uid) != os.Geteuid()) {
			return fmt.Errorf("socket directory %s exists and is not ours: remove it", c.socketDir)
		}
		if err := c.chown(c.socketDir); err != nil {
			return err
		}
	} else if err := os.MkdirAll(c.socketDir, 0o700); err != nil {
		return fmt.Errorf("create socket directory %s: %w", c.socketDir, err)
	}
	if err := os.Chmod(c.socketDir, 0o700); err != nil {
		return fmt.Errorf("restrict socket directory %s: %w", c.socketDir, err)
	}
	return c.chown(c.dir)
}

// chown gives the tree at root to the server's OS user when we run as root.
func (c *Cluster) chown(root string) error {
	if c.cred == nil {
		return nil
	}
	uid, gid := int(c.cred.Uid), int(c.cred.Gid)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("chown %s to OS user %s: %w", root, superuser, err)
	}
	return nil
}

// start runs pg_ctl start and waits until the server accepts connections.
func (c *Cluster) start(ctx context.Context) error {
	c.clearStaleLocks(ctx)
	if pid, ok := lockPID(filepath.Join(c.dir, "postmaster.pid")); ok && !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		// clearStaleLocks left it, so the pid is a live postmaster (a dead
		// one is PostgreSQL's to handle), and we hold the owner lock: the
		// process that started it is gone (killed, crashed). pg_ctl start
		// would fail, its reason buried in the server log.
		c.logger.WarnContext(ctx, "stopping the server a crashed process left running", slog.String("dir", c.dir), slog.Int("pid", pid))
		if out, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dir, "-m", "fast", "-w", "-t", "60"); err != nil {
			return fmt.Errorf("start postgres in %s: stop the server (pid %d) a crashed process left running: %w: %s", c.dir, pid, err, bytes.TrimSpace(out))
		}
	}
	settings := []string{
		"listen_addresses=", // no TCP at all
		"unix_socket_directories=" + c.socketDir,
		"unix_socket_permissions=0700",
		"max_connections=200",
	}
	if c.noSync {
		settings = append(settings, "fsync=off", "synchronous_commit=off", "full_page_writes=off")
	}
	// pg_ctl hands -o to /bin/sh, hence the shell quoting.
	opts := []string{"-p", strconv.Itoa(port)}
	for _, s := range settings {
		opts = append(opts, "-c", shellQuote(s))
	}
	logPath := filepath.Join(c.dir, "postgres.log")
	out, err := c.run(ctx, "pg_ctl", "start", "-w", "-t", "120", "-D", c.dir, "-l", logPath, "-o", strings.Join(opts, " "))
	if err != nil {
		return fmt.Errorf("start postgres in %s: %w: %s\nlast lines of %s:\n%s",
			c.dir, err, bytes.TrimSpace(out), logPath, tail(logPath, logTailLines))
	}
	return nil
}

// lockOwner takes the owner lock of data directory dir (see
// Cluster.owner), creating dir + ".lock" if needed.
func lockOwner(dir string) (*os.File, error) {
	path := dir + ".lock"
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start postgres in %s: open %s: %w", dir, path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("start postgres in %s: another process uses this data directory (it holds %s), "+
				"probably another erp (make run, erp serve); stop it first, or set DATABASE_URL to use its server", dir, path)
		}
		return nil, fmt.Errorf("start postgres in %s: lock %s: %w", dir, path, err)
	}
	return f, nil
}

// releaseOwner lets go of the owner lock; safe to call more than once.
func (c *Cluster) releaseOwner() {
	if c.owner != nil {
		_ = c.owner.Close() // closing the last descriptor releases the flock
		c.owner = nil
	}
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// clearStaleLocks removes postmaster.pid and the socket lock file when the
// process they name is certainly not a postmaster: a zombie, or another
// program that reused the pid after a crash or a container restart.
// PostgreSQL itself only checks that the pid is alive, and would refuse to
// start. Removing the file is safe even if orphaned backends of the old
// server survive: the new postmaster still finds their shared memory
// segment (its key derives from the data directory) and refuses to start.
func (c *Cluster) clearStaleLocks(ctx context.Context) {
	for _, lock := range []string{
		filepath.Join(c.dir, "postmaster.pid"),
		filepath.Join(c.socketDir, fmt.Sprintf(".s.PGSQL.%d.lock", port)),
	} {
		pid, ok := lockPID(lock)
		if !ok || !staleProcess(pid) {
			continue
		}
		if err := os.Remove(lock); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.logger.WarnContext(ctx, "remove stale lock file", slog.String("file", lock), slog.Any("err", err))
			continue
		}
		c.logger.WarnContext(ctx, "removed stale lock file", slog.String("file", lock), slog.Int("pid", pid))
	}
}

func lockPID(path string) (int, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	return pid, err == nil && pid > 0
}

// staleProcess reports whether pid is alive but certainly no postmaster.
// A dead pid is left to PostgreSQL, which handles it.
func staleProcess(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	} else if errors.Is(err, syscall.EPERM) {
		// Our server would run as us (or we are root and may signal anyone).
		return os.Geteuid() != 0
	}
	proc := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(proc + "/stat")
	if err != nil {
		return false // no /proc: let PostgreSQL decide
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && bytes.HasPrefix(stat[i:], []byte(") Z")) {
		return true
	}
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	name := filepath.Base(string(argv0))
	return !strings.Contains(name, "postgres") && !strings.Contains(name, "postmaster")
}

// tail returns up to the last n lines of the file at path, or a note saying
// why it cannot.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	const window = 64 << 10 // bytes: far more than 20 log lines
	if info, err := f.Stat(); err == nil && info.Size() > window {
		if _, err := f.Seek(info.Size()-window, io.SeekStart); err != nil {
			return fmt.Sprintf("(%v)", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ensureDatabase creates c.dbName unless it exists.
func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.AdminURL())
	if err != nil {
		return fmt.Errorf("connect to postgres in %s: %w", c.dir, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", c.dbName).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", c.dbName, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.dbName}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DuplicateDatabase {
		return nil // created concurrently
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", c.dbName, err)
	}
	c.logger.InfoContext(ctx, "database created", slog.String("database", c.dbName))
	return nil
}

// run runs a PostgreSQL binary as the server's OS user and returns its
// combined output.
func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	// The server's user may not be able to enter our working directory.
	cmd.Dir = "/"
	cmd.Env = serverEnv()
	// A process group of its own keeps the terminal's Ctrl-C (SIGINT to the
	// foreground group) away from pg_ctl and the postmaster it forks, so the
	// server lives until our graceful Stop. (pg_ctl also calls setsid.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	return cmd.CombinedOutput()
}

// serverEnv is our environment without PG* variables, which would change
// where pg_ctl and postgres look (PGDATA, PGPORT, PGCTLTIMEOUT, ...).
func serverEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
}
