# Developer and CI entry points. `make test` needs nothing but Go and the
# PostgreSQL server binaries: the tests start their own private PostgreSQL
# (db/pgtest), unless TEST_DATABASE_URL names an existing server.

GO ?= go

.PHONY: run test demo build generate vet fmt pg-binaries

run: pg-binaries
	$(GO) run . serve

test: pg-binaries e2e/node_modules
	$(GO) test -race -count=1 ./...

# The npm clients the end-to-end test drives (graphql-ws,
# subscriptions-transport-ws), installed from the lock file when missing
# or older than it.
e2e/node_modules: e2e/package.json e2e/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing: the end-to-end tests need Node.js 20+ with npm (e.g. 'apt-get install nodejs npm')" >&2; exit 1; }
	npm ci --prefix e2e --no-audit --no-fund

demo:
	$(GO) run . demo

build:
	$(GO) build -o erp .

generate:
	$(GO) tool gqlgen generate

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
