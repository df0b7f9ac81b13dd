# Developer and CI entry points. `make test` needs Go, the PostgreSQL server
# binaries, Node (20+) and Debian's Chromium: the tests start their own
# private PostgreSQL (db/pgtest), unless TEST_DATABASE_URL names an existing
# server; the process-level tests in e2e/ build the erp binary, run the npm
# clients of e2e/ and drive Chromium with playwright-core from e2e/browser/.

GO ?= go
NPM ?= npm

.PHONY: run test fuzz demo build generate check-generate lint vet fmt pg-binaries browser-deps pgbouncer web bench bench-quick

run: pg-binaries
	$(GO) run . serve

test: pg-binaries e2e/node_modules browser-deps pgbouncer
	$(GO) test -race -count=1 ./...

# fuzz runs every fuzz target (func FuzzX in a _test.go file) on FUZZTIME
# inputs with FUZZPARALLEL workers. A failing input is written to the package's
# testdata/fuzz/FuzzX/: fix the code and commit the file, which make test
# then runs as a regular test (as it runs every committed seed).
# FUZZTIME is a count of inputs, not a duration: with a duration, Go 1.26's
# fuzz coordinator (internal/fuzz.CoordinateFuzzing) can race its own
# deadline and fail the target with "context deadline exceeded" and no input.
FUZZTIME ?= 10000x
FUZZPARALLEL ?= 2
fuzz:
	@set -e; for file in $$(git grep -l '^func Fuzz' -- '*_test.go'); do \
		for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$file"); do \
			echo "fuzz $$target ($$(dirname "$$file"), $(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) -parallel $(FUZZPARALLEL) "./$$(dirname "$$file")"; \
		done; \
	done

# The npm clients e2e/node_test.go drives (graphql-ws,
# subscriptions-transport-ws), installed from the lock file when missing
# or older than it.
e2e/node_modules: e2e/package.json e2e/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: the end-to-end tests need Node.js 20+ with npm (e.g. 'apt-get install nodejs npm')" >&2; exit 1; }
	npm ci --prefix e2e --no-audit --no-fund

demo:
	$(GO) run . demo

build:
	$(GO) build -o erp .

# generate rebuilds gqlgen's graph/*.generated.go (from graph/*.graphqls)
# and sqlc's db/internal/dbsqlc (from db/queries/*.sql and the
# migrations); the output is committed.
generate:
	$(GO) tool gqlgen generate
	$(GO) tool sqlc generate
	$(GO) run ./app/config/configdoc > docs/configuration.md

# check-generate fails when the committed generated code is stale (CI).
check-generate: generate
	@git diff --exit-code --stat -- graph db/internal resolvers docs/configuration.md || { echo "generated code is stale: run 'make generate' and commit the result" >&2; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard -- graph db/internal resolvers docs/configuration.md); \
	if [ -n "$$untracked" ]; then echo "generated files not committed: $$untracked" >&2; exit 1; fi

# lint runs golangci-lint v2 with .golangci.yml.
lint:
	$(GO) tool golangci-lint run ./...

# web rebuilds the embedded pages (web/dist, committed) from web/src with
# Vite; commit the result. Needs Node 20.19+ and npm.
web:
	$(NPM) ci --prefix web
	$(NPM) run build --prefix web

vet:
	$(GO) vet ./...

fmt:
	$(GO) fmt ./...

# pg-binaries makes sure initdb and pg_ctl are where db/localpg.FindBinaries
# looks (PATH, then /usr/lib/postgresql/*/bin), installing the distro package
# when we are root on an apt system. An existing server (DATABASE_URL or
# TEST_DATABASE_URL) makes them unnecessary.
pg-binaries:
	@if [ -n "$$DATABASE_URL$$TEST_DATABASE_URL" ]; then exit 0; fi; \
	if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then exit 0; fi; \
	for d in /usr/lib/postgresql/*/bin; do \
		if [ -x "$$d/initdb" ] && [ -x "$$d/pg_ctl" ]; then exit 0; fi; \
	done; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "pg-binaries: installing the PostgreSQL server binaries (apt-get install postgresql)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql; \
	else \
		echo "PostgreSQL server binaries (initdb, pg_ctl) are missing: install them with 'sudo apt-get install postgresql' (or your distro's postgresql server package), or set DATABASE_URL / TEST_DATABASE_URL to an existing server." >&2; \
		exit 1; \
	fi

# browser-deps gets what the browser test (e2e/browser_test.go) needs:
# playwright-core in e2e/browser/node_modules (npm ci, from its lock) and
# /usr/bin/chromium (Debian's package, installed when we are root on apt).
browser-deps:
	@if [ ! -f e2e/browser/node_modules/playwright-core/package.json ]; then \
		command -v $(NPM) >/dev/null || { echo "npm is missing: install Node.js 20+ with npm (Debian: apt-get install nodejs npm)" >&2; exit 1; }; \
		$(NPM) ci --prefix e2e/browser --no-audit --no-fund; \
	fi
	@if [ -x /usr/bin/chromium ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "browser-deps: installing Chromium (apt-get install chromium)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium; \
	else \
		echo "Chromium is missing: install Debian's package with 'sudo apt-get install chromium' (the browser test runs /usr/bin/chromium)." >&2; \
		exit 1; \
	fi

# pgbouncer gets PgBouncer for the tests through a transaction pooler
# (db/pgtest.PgBouncer): Debian's package, installed when we are root on
# apt; otherwise a note, and those tests skip (they fail under CI=true).
pgbouncer:
	@if command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "pgbouncer: installing PgBouncer (apt-get install pgbouncer)"; \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer; \
	else \
		echo "note: PgBouncer is missing, so the tests through a connection pooler will be skipped ('sudo apt-get install pgbouncer')." >&2; \
	fi

# bench runs the load tool (bench/): a private PostgreSQL with
# fsync on, the real server binary, and a reference for every figure in the
# same run; it prints one table row per figure, with the CPU per unit of
# work of both sides (A, B, C, E and H: medians of 3 interleaved runs),
# and writes bench/results/latest.json and latest.txt (the console). Takes
# about 25 minutes on a quiet machine (figure F writes a journal of ten
# million events, 5 GB); bench-quick is a smoke run of about 5 minutes with
# tiny sizes (bench/results/quick.*).
BENCH_FLAGS ?= -figures A,B,C,D,E,F,G,H
bench: pg-binaries
	$(GO) run ./bench $(BENCH_FLAGS)

bench-quick: pg-binaries
	$(GO) run ./bench -quick $(BENCH_FLAGS)
